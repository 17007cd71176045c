package hybridsync_test

import (
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
)

// BenchmarkQueryCompleted is the baseline for BenchmarkSyncCompleted: a bare
// query of a completed event.
func BenchmarkQueryCompleted(b *testing.B) {
	ev := simdev.New(1).Launch(0, 0)
	for b.Loop() {
		ev.Query()
	}
}

// BenchmarkSyncCompleted: Sync on an already completed event of a known
// kernel. Its overhead over BenchmarkQueryCompleted is the price every app
// pays on the fast path (target: under 100 ns).
func BenchmarkSyncCompleted(b *testing.B) {
	ev := simdev.New(1).Launch(0, 0)
	s := hybridsync.New(hybridsync.Config{})
	s.Sync(ev, 1)
	for b.Loop() {
		s.Sync(ev, 1)
	}
}

// BenchmarkDictUpdateContended: 16 goroutines updating the same few kernels,
// the worst case for the compare-and-swap loop.
func BenchmarkDictUpdateContended(b *testing.B) {
	d := hybridsync.NewDict(hybridsync.DefaultDictSize)
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		i := int64(0)
		for pb.Next() {
			i++
			d.Update(hybridsync.KernelID(1+i%4), 500_000+i%1000)
		}
	})
}

// BenchmarkSyncWait: one full wait on a 100 µs kernel per iteration, per
// mode, for the CPU each mode spends (run with -benchtime and compare
// user+sys time, or see vgpu-probe bench).
func BenchmarkSyncWait(b *testing.B) {
	for _, name := range []string{"hybrid", "spin", "block"} {
		mode, _ := hybridsync.ParseMode(name)
		b.Run(name, func(b *testing.B) {
			dev := simdev.New(1)
			s := hybridsync.New(hybridsync.Config{Mode: mode})
			for b.Loop() {
				s.Sync(dev.Launch(0, 100*time.Microsecond), 1)
			}
		})
	}
}
