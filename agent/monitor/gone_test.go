//go:build linux

package monitor

import (
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// These tests check the monitor's bookkeeping of what goes, with real
// processes (the kernel's counters come from their /proc) and programs'
// counters set by the test.

// statsProbe keeps per-thread counters like the programs' map: an entry
// from Watch to Unwatch, whatever the thread does in between.
type statsProbe struct {
	mu    sync.Mutex
	stats map[uint32]*bpf.SchedThreadStats
}

func newStatsProbe() *statsProbe { return &statsProbe{stats: map[uint32]*bpf.SchedThreadStats{}} }

func (p *statsProbe) Watch(tid uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats[tid] = &bpf.SchedThreadStats{}
	return nil
}

func (p *statsProbe) Unwatch(tid uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.stats, tid)
	return nil
}

func (p *statsProbe) Stats(tid uint32, out *bpf.SchedThreadStats) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.stats[tid]
	if !ok {
		return bpfload.ErrNotWatched
	}
	*out = *s
	return nil
}

// ran adds on-CPU time and preemptions to a watched thread's counters.
func (p *statsProbe) ran(t *testing.T, tid int, run time.Duration, preemptions uint64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.stats[uint32(tid)]
	if !ok {
		t.Fatalf("tid %d not watched", tid)
	}
	s.RunNs += uint64(run)
	s.Switches += preemptions
	s.Preemptions += preemptions
}

func (p *statsProbe) watching(tid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.stats[uint32(tid)]
	return ok
}

func (p *statsProbe) Corunners() (map[uint32][]bpfload.Corunner, error) { return nil, nil }
func (p *statsProbe) Drops() (uint64, error)                            { return 0, nil }
func (p *statsProbe) ReadEvent(*ringbuf.Record, *bpf.SchedSwitchEvent) error {
	return ringbuf.ErrClosed
}
func (p *statsProbe) Mode() string      { return "test" }
func (p *statsProbe) Attach() error     { return nil }
func (p *statsProbe) Detach() error     { return nil }
func (p *statsProbe) StopEvents() error { return nil }

// sleeper starts a process that sleeps until killed; kill ends and reaps
// it, so that its /proc entry is gone.
func sleeper(t *testing.T) (pid int, kill func()) {
	t.Helper()
	c := exec.Command("sleep", "1000")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() { once.Do(func() { c.Process.Kill(); c.Wait() }) }
	t.Cleanup(kill)
	return c.Process.Pid, kill
}

func pidTarget(pid int) targets.Target {
	return targets.Target{Kind: targets.KindPID, Name: strconv.Itoa(pid), Threads: []targets.Thread{{TID: pid, VCPU: -1}}}
}

func newGoneMonitor(p Probe) *Monitor {
	return New(p, Options{Log: zerolog.Nop(), Window: time.Minute})
}

// find returns the snapshot's target of that kind and name, failing the
// test unless there is exactly one.
func find(t *testing.T, s *model.Snapshot, kind targets.Kind, name string) *model.Target {
	t.Helper()
	var out *model.Target
	for i := range s.Targets {
		if tg := &s.Targets[i]; tg.Kind == string(kind) && tg.Name == name {
			if out != nil {
				t.Fatalf("target %s/%s twice in %+v", kind, name, s.Targets)
			}
			out = tg
		}
	}
	if out == nil {
		t.Fatalf("no target %s/%s in %+v", kind, name, s.Targets)
	}
	return out
}

// A process that exits keeps its measurements, marked gone, even before
// its source notices: its counters are the last read advanced by what the
// programs counted until it went.
func TestExitedProcessStays(t *testing.T) {
	p := newStatsProbe()
	m := newGoneMonitor(p)
	pid, kill := sleeper(t)
	m.Apply(targets.Event{Kind: targets.Added, Target: pidTarget(pid)})
	if !p.watching(pid) {
		t.Fatalf("pid %d not watched", pid)
	}
	p.ran(t, pid, 700*time.Millisecond, 3)
	before := time.Now()
	kill()

	snap := m.Snapshot()
	tg := find(t, &snap, targets.KindPID, strconv.Itoa(pid))
	if !tg.Gone || tg.GoneAt.Before(before) || tg.GoneAt.After(time.Now()) {
		t.Fatalf("target gone=%v at %v, want gone after %v", tg.Gone, tg.GoneAt, before)
	}
	if len(tg.Threads) != 1 {
		t.Fatalf("threads %+v, want the one", tg.Threads)
	}
	th := tg.Threads[0]
	if !th.Gone || th.GoneAt.IsZero() {
		t.Errorf("thread not marked gone: %+v", th)
	}
	// sleep itself ran for well under 700 ms.
	if th.RunSeconds < 0.7 || th.RunSeconds > 1.5 || th.Preemptions < 3 {
		t.Errorf("thread ran %.3f s with %d preemptions, want the programs' 0.7 s and 3 on top of the kernel's last read",
			th.RunSeconds, th.Preemptions)
	}
	if th.Cumulative != nil {
		t.Error("a gone thread keeps cumulative counters: the metrics would keep its series")
	}
	if p.watching(pid) {
		t.Error("the exited thread is still watched")
	}
	if live := snap.Live(); len(live.Targets) != 0 {
		t.Errorf("live targets %+v, want none", live.Targets)
	}
	if snap.WindowSeconds <= 0 {
		t.Errorf("window_seconds %g: the gone thread's window is left out", snap.WindowSeconds)
	}

	// The source's own notice later changes nothing.
	m.Apply(targets.Event{Kind: targets.Removed, Target: pidTarget(pid)})
	snap = m.Snapshot()
	if got := find(t, &snap, targets.KindPID, strconv.Itoa(pid)); got.GoneAt != tg.GoneAt || got.Threads[0].RunSeconds != th.RunSeconds {
		t.Errorf("after Removed: %+v, want %+v", got, tg)
	}
	if m.TargetCount() != 1 {
		t.Errorf("TargetCount %d, want the gone target counted", m.TargetCount())
	}

	// A window later it is dropped.
	m.mu.Lock()
	m.expire(monoNow() + uint64(2*time.Minute))
	m.mu.Unlock()
	if snap = m.Snapshot(); len(snap.Targets) != 0 {
		t.Errorf("targets a window after it went: %+v", snap.Targets)
	}
}

// A target its source removes while its threads still run (a domain
// stopping) is measured up to then, and unwatched; when it starts again,
// it is one live target.
func TestRemovedTargetStays(t *testing.T) {
	p := newStatsProbe()
	m := newGoneMonitor(p)
	pid, _ := sleeper(t)
	tg := pidTarget(pid)
	tg.Kind, tg.Name = targets.KindDomain, "guest1"
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	p.ran(t, pid, 200*time.Millisecond, 1)
	m.Apply(targets.Event{Kind: targets.Removed, Target: tg})
	if p.watching(pid) {
		t.Error("a removed target's thread is still watched")
	}
	snap := m.Snapshot()
	got := find(t, &snap, targets.KindDomain, "guest1")
	// Its thread still runs: its counters are the kernel's at removal
	// (sleep has not run since it was watched), not the programs'.
	if !got.Gone || len(got.Threads) != 1 || !got.Threads[0].Gone || got.Threads[0].RunSeconds >= 0.2 {
		t.Fatalf("removed target %+v, want it gone with its thread's counters from the kernel", got)
	}

	// The domain starts again: one target of that name, live.
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	snap = m.Snapshot()
	if got := find(t, &snap, targets.KindDomain, "guest1"); got.Gone || got.Threads[0].Gone {
		t.Fatalf("target back: %+v, want it live", got)
	}
}

// A thread that leaves a target that stays is kept in it, marked gone,
// until it comes back; at most MaxGoneThreads are kept per target.
func TestThreadLeavesTarget(t *testing.T) {
	p := newStatsProbe()
	m := newGoneMonitor(p)
	cg := targets.Target{Kind: targets.KindCgroup, Name: "/test"}
	var killFirst func()
	for i := range MaxGoneThreads + 2 {
		pid, kill := sleeper(t)
		if i == 0 {
			killFirst = kill
		}
		cg.Threads = append(cg.Threads, targets.Thread{TID: pid, VCPU: -1})
	}
	m.Apply(targets.Event{Kind: targets.Added, Target: cg})
	first := cg.Threads[0].TID
	p.ran(t, first, 300*time.Millisecond, 2)

	// All but the last leave: the first one by exiting.
	killFirst()
	one := cg
	one.Threads = cg.Threads[len(cg.Threads)-1:]
	m.Apply(targets.Event{Kind: targets.Added, Target: one})

	snap := m.Snapshot()
	got := find(t, &snap, targets.KindCgroup, "/test")
	if got.Gone {
		t.Fatal("target marked gone while it has a thread")
	}
	if len(got.Threads) != 1+MaxGoneThreads {
		t.Fatalf("%d threads, want the live one and %d gone", len(got.Threads), MaxGoneThreads)
	}
	if got.Threads[0].Gone {
		t.Errorf("the live thread is marked gone: %+v", got.Threads[0])
	}
	for _, th := range got.Threads[1:] {
		if !th.Gone {
			t.Errorf("thread %d left but is not marked gone", th.TID)
		}
		if th.TID == first {
			t.Errorf("thread %d kept beyond the cap of %d (the oldest goes first)", first, MaxGoneThreads)
		}
	}
	if live := snap.Live(); len(live.Targets) != 1 || len(live.Targets[0].Threads) != 1 {
		t.Errorf("live snapshot %+v, want the one live thread", live.Targets)
	}

	// The threads come back (but the one that exited, which is no longer
	// kept): each once, live.
	m.Apply(targets.Event{Kind: targets.Added, Target: cg})
	snap = m.Snapshot()
	got = find(t, &snap, targets.KindCgroup, "/test")
	seen := map[int]bool{}
	for _, th := range got.Threads {
		if seen[th.TID] || th.Gone || th.TID == first {
			t.Fatalf("thread %d (gone=%v) twice or unexpected in %+v", th.TID, th.Gone, got.Threads)
		}
		seen[th.TID] = true
	}
	if len(seen) != len(cg.Threads)-1 {
		t.Errorf("%d threads back, want %d", len(seen), len(cg.Threads)-1)
	}
}
