// Package hybridsync is the polling-then-blocking CPU-GPU synchronization
// primitive: Syncer.Sync waits for a device event the cheapest way it can,
// given how long the kernel is expected to run (a per-kernel timing
// dictionary learned online), how much of the thread's CPU time slice is left
// (a ThresholdSource) and how late a blocked thread wakes up on this host or
// VM (measured online).
//
// The one invariant: Sync never returns before the awaited work is complete,
// and it returns exactly the error the device's blocking wait would.
//
// Policies (Mode): hybrid (default, the cost model), paper (Algorithm 1 of
// the reference paper, for reproduction), spin, yield, block, cuda-auto.
//
// Beside the primitive: its Engine (the plans and delegations the C
// library executes) and its configuration (env.go, the table of every
// HYBRIDSYNC_* variable). Below it, hybridsync/signal (what it knows of a
// thread's CPU) and hybridsync/clock; above it, hybridsync/openmp
// (OpenMP's waits) and hybridsync/simdev (a simulated GPU).
package hybridsync
