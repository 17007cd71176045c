package workload

import (
	"runtime"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
)

// sink keeps the compiler from removing Spin's work.
var sink uint64

// Spin does n units of real CPU work: integer arithmetic that stays in
// registers, so its duration depends on how much CPU the thread gets and
// not on memory or caches shared with a co-runner.
func Spin(n int64) {
	x := sink | 1
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink = x
}

// Calibrate returns how many units of Spin take d on the calling thread.
// It takes the fastest of several rounds: a slower round was interrupted,
// and the work must be a fixed amount of CPU, not of wall time.
func Calibrate(d time.Duration) int64 {
	const probe = 200_000
	best := int64(1<<63 - 1)
	for range 15 {
		start := clock.Now()
		Spin(probe)
		best = min(best, clock.Now()-start)
	}
	return int64(float64(probe) * float64(d) / float64(max(best, 1)))
}

// CalibrateOn is Calibrate on a thread pinned to cpu, the CPU the work will
// run on, taken before any co-runner starts there. The thread exits with
// its goroutine, so the pinning does not leak to other goroutines.
func CalibrateOn(cpu int, d time.Duration) int64 {
	ch := make(chan int64)
	go func() {
		runtime.LockOSThread()
		corunner.Pin(cpu)
		ch <- Calibrate(d)
	}()
	return <-ch
}
