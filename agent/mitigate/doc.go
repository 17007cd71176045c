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
// The slice only helps while another process's task competes for the
// thread's CPU; alone there is nothing to preempt, and it only makes the
// program's own threads preempt each other. Gated on contention
// (Options.Contention, as the agent runs it), a watched thread has the
// slice only while agent/contention's verdict says its CPU is shared,
// and its own back once it has been free for contention.For; Run makes
// those changes, at most one per thread per contention.For, off the
// switch events' path.
//
// Custom slices need a kernel that honours sched_attr.sched_runtime for
// fair-class threads (Linux 6.12 and later). Check finds out by trying it
// on a thread of this process and reading it back.
package mitigate
