// Package assembly puts the agent's parts together: the mitigator
// (--mitigate's slices), the hint publisher (--hints' pages), the eBPF
// programs and the monitor. The host agent (agent/daemon) and the agent
// run inside experiments (agent/hintfeed) both use it, so that the
// order the parts start and stop in, and what is undone on a failure,
// is written once.
//
// With hints or a mitigation gated on contention, one
// contention.Tracker holds the threads' contention: the publisher feeds
// it from the monitor's switch events (or, without hints, the monitor
// does directly), and the pages and the mitigator's gate read it.
//
// Order: a change of the targets reaches the mitigator first (so that a
// thread's first page carries its slice), then the publisher, then the
// monitor. Close stops the monitor, then restores the slices, then
// removes the pages, then unloads the programs.
package assembly
