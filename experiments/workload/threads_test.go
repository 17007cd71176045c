package workload

import (
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
)

// TestRunThreadsBarrier runs one thread per CPU for real: every thread does
// every step, and no thread starts step i+1 before every thread noticed
// its kernel of step i (the bulk-synchronous barrier the vCPU-count
// scaling rests on).
func TestRunThreadsBarrier(t *testing.T) {
	cpus, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	dev, wait, closeDev, err := OpenDevices("sim", hybridsync.ModeBlock, len(cpus))
	if err != nil {
		t.Fatal(err)
	}
	defer closeDev()
	const steps = 60
	cfg := Config{Steps: steps, Work: Calibrate(100 * time.Microsecond), Profile: simdev.Fixed("k", 300*time.Microsecond, 0.05), Timeline: true}
	r, err := RunThreads(cfg, cpus, dev, wait)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Timeline) != steps*len(cpus) {
		t.Fatalf("timeline has %d steps, want %d x %d threads", len(r.Timeline), steps, len(cpus))
	}
	// Rebuild per-thread step order (the timeline is sorted by start).
	per := make([][]Step, len(cpus))
	for _, s := range r.Timeline {
		per[s.Thread] = append(per[s.Thread], s)
	}
	for i := 1; i < steps; i++ {
		var lastNoticed, firstStart int64 = 0, 1 << 62
		for th := range per {
			lastNoticed = max(lastNoticed, per[th][i-1].Noticed)
			firstStart = min(firstStart, per[th][i].HostStart)
		}
		if firstStart < lastNoticed {
			t.Fatalf("step %d started at %d before step %d was noticed by all at %d", i, firstStart, i-1, lastNoticed)
		}
	}
	// Kernels of one step on different threads run side by side (a
	// stream each), not queued behind each other: each completes one
	// kernel time (300 µs ± 5%) after its own launch.
	for _, s := range r.Timeline {
		if d := s.Complete - s.Launch; d > 320_000 {
			t.Fatalf("thread %d: kernel took %d ns from launch: the threads' kernels were queued", s.Thread, d)
		}
	}
}

// TestRunThreadsWaitKind checks that the wait kind each step records is
// what the mode does: a spinning wait keeps the CPU, a blocking one
// leaves it.
func TestRunThreadsWaitKind(t *testing.T) {
	cpus, _ := corunner.Online()
	for mode, want := range map[hybridsync.Mode]string{hybridsync.ModeSpin: WaitSpin, hybridsync.ModeBlock: WaitBlock} {
		dev, wait, closeDev, err := OpenDevices("sim", mode, 1)
		if err != nil {
			t.Fatal(err)
		}
		r, err := RunThreads(Config{Steps: 50, Profile: simdev.Fixed("k", 500*time.Microsecond, 0), Timeline: true}, cpus[len(cpus)-1:], dev, wait)
		closeDev()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range r.Timeline {
			if s.Wait == want {
				n++
			}
		}
		// Most, not all: another process may take the CPU mid-wait.
		if n < len(r.Timeline)/2 {
			t.Errorf("%v: %d of %d waits were %q", mode, n, len(r.Timeline), want)
		}
	}
}

func TestRunThreadsRejects(t *testing.T) {
	dev, wait, closeDev, _ := OpenDevices("sim", hybridsync.ModeBlock, 1)
	defer closeDev()
	if _, err := RunThreads(Config{Steps: 1, Profile: simdev.Mixed}, nil, dev, wait); err == nil {
		t.Error("no cpus accepted")
	}
	if _, err := RunThreads(Config{Steps: 1, Profile: simdev.Mixed}, []int{0, 1}, dev, wait); err == nil {
		t.Error("two cpus with one device accepted")
	}
	if _, err := RunThreads(Config{Steps: 1, Profile: simdev.Mixed}, []int{1 << 15}, dev, wait); err == nil {
		t.Error("pinning to a cpu that does not exist succeeded")
	}
	if _, _, _, err := OpenDevices("tpu", hybridsync.ModeBlock, 1); err == nil {
		t.Error("unknown device opened")
	}
}

func TestWaitKind(t *testing.T) {
	for _, tc := range []struct {
		wall, cpu int64
		want      string
	}{{1000, 1000, WaitReady}, {100_000, 95_000, WaitSpin}, {100_000, 5_000, WaitBlock}, {100_000, 50_000, WaitMixed}} {
		if got := waitKind(tc.wall, tc.cpu); got != tc.want {
			t.Errorf("waitKind(%d, %d) = %s, want %s", tc.wall, tc.cpu, got, tc.want)
		}
	}
}
