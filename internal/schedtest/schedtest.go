// Package schedtest holds what tests of the scheduler's side of the
// agent share: a parked thread of the test's own process, a thread's
// slice as the kernel reports it, and the CPU a test pins its spinning
// thread and busy loop to.
package schedtest

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Parked starts an OS thread of this process that sleeps until the test
// ends, and returns its tid.
func Parked(t testing.TB) int {
	t.Helper()
	tids := make(chan int)
	stop := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		tids <- unix.Gettid()
		<-stop
	}()
	t.Cleanup(func() { close(stop) })
	return <-tids
}

// Runtime is thread tid's sched_runtime (its EEVDF slice, ns) as
// sched_getattr reports it.
func Runtime(t testing.TB, tid int) uint64 {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatalf("sched_getattr %d: %v", tid, err)
	}
	return a.Runtime
}

// LastCPU is the set of one CPU, the last this process may run on: where
// a test puts a thread and the busy loop that contends with it.
func LastCPU(t testing.TB) unix.CPUSet {
	t.Helper()
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	for cpu := len(all)*64 - 1; cpu >= 0; cpu-- {
		if all.IsSet(cpu) {
			one.Set(cpu)
			return one
		}
	}
	t.Fatal("no CPU in this process's affinity")
	return one
}
