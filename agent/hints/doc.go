// Package hints publishes the remaining-time-slice hint page
// (package hintpage) of every watched target: one file per VM or local
// target in the hints directory, mode 0600, owned by the user the target
// runs as, updated at every switch-in of the target's threads (from the
// agent's switch events) and refreshed from the per-thread BPF counters
// every 20 ms.
package hints
