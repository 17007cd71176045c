// Package experiments holds the paper's experiments: CPU contention
// (cgroup bandwidth control, co-runners), the NAMD-like workload, and the
// runner that crosses them. Each concern is a subpackage.
package experiments
