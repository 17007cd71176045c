// Package mitigate gives watched GPU threads (a GPU VM's vCPU threads, or
// a local process's threads) a short EEVDF slice, and puts the old one
// back when they stop being watched.
//
// Under EEVDF a waking thread preempts the running one only when its
// virtual deadline is earlier, and the deadline is one slice after its
// eligible time. A blocking GPU waiter that sleeps on a completion has a
// default slice (0.7-3 ms) and so often waits for the co-runner's tick;
// with a 100 µs slice (sched_setattr, SCHED_OTHER, sched_runtime) its
// deadline is near and it runs as soon as the completion wakes it. Its
// share of the CPU does not change: the slice sets how often it may
// preempt, not how much it runs.
//
// Custom slices need a kernel that honours sched_attr.sched_runtime for
// fair-class threads (Linux 6.12 and later). Check finds out by trying it
// on a thread of this process and reading it back.
package mitigate
