// Package clock is the monotonic time, in ns, that every timestamp of
// hybridsync and its signals is expressed in.
package clock

import _ "unsafe" // for go:linkname

// nanotime is the runtime's monotonic clock (CLOCK_MONOTONIC on Linux, read
// through the vDSO). time.Now also reads the wall clock and costs about twice
// as much; Sync reads the clock on every spin iteration, so the difference
// shows in the completed-event fast path.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Now returns the monotonic time in nanoseconds that every timestamp in this
// package is expressed in (CLOCK_MONOTONIC).
func Now() int64 { return nanotime() }

// Infinite is the remaining time slice of a thread that nothing is expected to
// preempt.
const Infinite int64 = 1<<63 - 1
