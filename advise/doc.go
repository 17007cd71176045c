// Package advise is the product's answer to "how should I run my program
// on this VM?": it runs a user's command once as it is to see what it
// loads (probe.go), then in every way that can apply to it alone and
// beside busy loops through the apps suite, until results/decide's rule
// decides or a bound is reached (advise.go), and says the answer in one
// line. `vgpu-probe advise` is its command.
package advise
