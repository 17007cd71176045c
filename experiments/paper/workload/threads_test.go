package workload

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/results"
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
	open, err := ThreadOpenerFor("sim", hybridsync.ModeBlock, len(cpus))
	if err != nil {
		t.Fatal(err)
	}
	const steps = 60
	cfg := Config{Steps: steps, Work: Calibrate(100 * time.Microsecond), Profile: simdev.Fixed("k", 300*time.Microsecond, 0.05), Timeline: true}
	var opened atomic.Int32
	counting := func(th int) (Device, Waiter, func(), error) {
		opened.Add(1)
		return open(th)
	}
	readyCalls := 0
	r, err := RunThreads(cfg, cpus, counting, func() error {
		readyCalls++
		if int(opened.Load()) != len(cpus) {
			t.Errorf("ready called with %d of %d devices open", opened.Load(), len(cpus))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if readyCalls != 1 {
		t.Errorf("ready called %d times", readyCalls)
	}
	if len(r.Timeline) != steps*len(cpus) {
		t.Fatalf("timeline has %d steps, want %d x %d threads", len(r.Timeline), steps, len(cpus))
	}
	// Rebuild per-thread step order (the timeline is sorted by start).
	per := make([][]results.Step, len(cpus))
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
		open, err := ThreadOpenerFor("sim", mode, 1)
		if err != nil {
			t.Fatal(err)
		}
		r, err := RunThreads(Config{Steps: 50, Profile: simdev.Fixed("k", 500*time.Microsecond, 0), Timeline: true}, cpus[len(cpus)-1:], open, nil)
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
	open, _ := ThreadOpenerFor("sim", hybridsync.ModeBlock, 1)
	if _, err := RunThreads(Config{Steps: 1, Profile: simdev.Mixed}, nil, open, nil); err == nil {
		t.Error("no cpus accepted")
	}
	if _, err := RunThreads(Config{Steps: 1, Profile: simdev.Mixed}, []int{1 << 15}, open, nil); err == nil {
		t.Error("pinning to a cpu that does not exist succeeded")
	}
	// A thread whose device fails to open fails the run, before ready.
	cpus, _ := corunner.Online()
	failing := func(th int) (Device, Waiter, func(), error) {
		if th == len(cpus)-1 {
			return nil, nil, nil, errors.New("no such GPU")
		}
		return open(th)
	}
	if _, err := RunThreads(Config{Steps: 1, Profile: simdev.Mixed}, cpus, failing, func() error {
		t.Error("ready called although a device failed to open")
		return nil
	}); err == nil || !strings.Contains(err.Error(), "no such GPU") {
		t.Errorf("failed open: %v", err)
	}
	if _, err := ThreadOpenerFor("tpu", hybridsync.ModeBlock, 1); err == nil {
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
