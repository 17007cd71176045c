// Package contention keeps, per watched thread, whether another
// process's task competes for its CPU: the one verdict that both the hint
// publisher (agent/hints: a page's shared, throttled or free) and the
// mitigator (agent/mitigate: the short slice only while shared) read.
//
// A Tracker is fed the switch events of the eBPF programs (each the
// off-CPU interval a switch-in ends) and classifies every interval: a
// co-runner's turn (another process's task took the CPU for 100 µs or
// more), a throttle by the CPU bandwidth quota, or nothing worth knowing
// (a sleep, an interruption, the agent's own reader, the program's own
// threads). A thread is shared while a co-runner's turn ended within the
// last 500 ms (For), and free once it was watched that long without one
// or a throttle.
package contention
