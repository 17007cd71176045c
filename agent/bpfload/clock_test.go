package bpfload

import (
	"testing"

	"golang.org/x/sys/unix"
)

// MonoNow is CLOCK_MONOTONIC: between two readings of the system call.
func TestMonoNowIsMonotonic(t *testing.T) {
	for range 1000 {
		var a, b unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		now := MonoNow()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		if now < uint64(a.Nano()) || now > uint64(b.Nano()) {
			t.Fatalf("MonoNow %d outside CLOCK_MONOTONIC [%d, %d]", now, a.Nano(), b.Nano())
		}
	}
}
