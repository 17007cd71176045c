package bpfload

import _ "unsafe" // for go:linkname

// nanotime is the runtime's monotonic clock: CLOCK_MONOTONIC on Linux,
// read through the vDSO.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// MonoNow returns CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns and
// so of every time the programs record. unix.ClockGettime is a system
// call each time; the agent reads the clock for every slot it refreshes
// and every record it applies, and each system call can wake the Go
// runtime's sysmon from its deep sleep.
func MonoNow() uint64 { return uint64(nanotime()) }
