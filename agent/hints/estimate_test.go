package hints

import (
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

const tick4ms = 4_000_000

func TestTickFromConfig(t *testing.T) {
	for cfg, want := range map[string]uint64{
		"# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n": 4_000_000,
		"CONFIG_HZ=1000\n": 1_000_000,
		"CONFIG_HZ=abc\n":  0,
		"CONFIG_NO_HZ=y\n": 0,
	} {
		if got := tickFromConfig(strings.NewReader(cfg)); got != want {
			t.Errorf("%q: tick %d, want %d", cfg, got, want)
		}
	}
}

// Throttles come just after ticks (phase ~20 µs, one wrapping around the
// tick boundary); one came elsewhere and is outvoted.
func TestTickPhase(t *testing.T) {
	var p tickPhase
	if _, ok := p.phase(tick4ms); ok {
		t.Fatal("a phase from nothing")
	}
	for i, off := range []uint64{18_000, 22_000, 3_999_000, 2_500_000, 20_000} {
		p.add(uint64(i+10)*tick4ms+off, tick4ms)
	}
	// (18 + 22 - 1 + 20) / 4 µs: the outlier left out, -1 µs wrapped.
	if ph, ok := p.phase(tick4ms); !ok || ph != 14_750 {
		t.Fatalf("phase %d %v, want 14.75 µs", ph, ok)
	}
	// Scattered throttles (no tick behind them): no phase.
	var q tickPhase
	for i := range 8 {
		q.add(uint64(i)*1_300_000, tick4ms)
	}
	if ph, ok := q.phase(tick4ms); ok {
		t.Fatalf("phase %d from scattered throttles", ph)
	}
}

func running(in uint64) *thread {
	return &thread{tid: 1, switchIn: in, state: hintpage.StateRunning}
}

// Under a quota the run lasts until the first tick after the runtime the
// kernel had left at the switch-in is spent; the reader's formula
// (expected - (now - switch-in)) gives the time to that tick.
func TestQuotaRemaining(t *testing.T) {
	const in = 100*tick4ms + 2_900_000 // switched in mid-tick
	th := running(in)
	thr := contention.Thread{Since: 1, LastThrottled: in - 10_000_000}
	for i := range 4 {
		th.throttles.add(uint64(90+i)*tick4ms+20_000, tick4ms)
	}
	th.quota = quotaState{in: in, quota: 10_000_000, period: 20_000_000, refill: in + 19_000_000, left: 9_100_000}
	e := env{tick: tick4ms, cont: thr}
	now := uint64(in + 1_000_000)
	s := th.render(now, e)
	end := hintpage.NextTick(in+9_100_000, tick4ms, 20_000) // 103*4ms + 20 µs... the tick after in + 9.1 ms
	if s.Contention != hintpage.ContThrottled || s.ExpectedSliceNs != end-in || s.Remaining(now) != end-now {
		t.Fatalf("slot %+v: want expected %d remaining %d", s, end-in, end-now)
	}
	if s.QuotaUS != 10_000 || s.PeriodUS != 20_000 {
		t.Fatalf("quota from the kernel not published: %d/%d", s.QuotaUS, s.PeriodUS)
	}
	// Without a tick phase: when the runtime is spent.
	th.throttles = tickPhase{}
	if s := th.render(now, e); s.ExpectedSliceNs != 9_100_000 {
		t.Fatalf("no tick phase: expected %d, want 9.1 ms", s.ExpectedSliceNs)
	}
	// Overdrawn at the switch-in: throttled at once.
	th.quota.left = -500_000
	if s := th.render(now, e); s.ExpectedSliceNs != 1 || s.Remaining(now) != 0 {
		t.Fatalf("overdrawn: %+v", s)
	}
	// The pool is refilled before the runtime is spent: a whole quota more.
	th.quota.left, th.quota.refill = 9_000_000, in+2_000_000
	if s := th.render(now, e); s.ExpectedSliceNs != 12_000_000 {
		t.Fatalf("refill within the run: expected %d, want 2 + 10 ms", s.ExpectedSliceNs)
	}
	// The kernel's state belongs to another switch-in: the target's quota
	// less what ran since the last throttle.
	th.quota.in = in - 1
	th.runSinceThrottle = 3_000_000
	if s := th.render(now, env{quotaUS: 10_000, periodUS: 20_000, cont: thr}); s.ExpectedSliceNs != 7_000_000 {
		t.Fatalf("from the target's quota: expected %d, want 7 ms", s.ExpectedSliceNs)
	}
	if s := th.render(now, e); s.ExpectedSliceNs != 0 {
		t.Fatalf("no quota known: expected %d, want 0 (unknown)", s.ExpectedSliceNs)
	}
}

// With a co-runner too, the shorter of the slice and the quota.
func TestQuotaAndSlice(t *testing.T) {
	const in = 1_000_000_000
	th := running(in)
	e := env{cont: contention.Thread{Since: 1, LastThrottled: in - 5_000_000, LastShared: in - 4_000_000}}
	th.slice = 4_000_000
	th.quota = quotaState{in: in, quota: 10_000_000, period: 20_000_000, refill: in + 15_000_000, left: 9_000_000}
	if s := th.render(in+1000, e); s.Contention != hintpage.ContShared || s.ExpectedSliceNs != 4_000_000 {
		t.Fatalf("slice shorter: %+v", s)
	}
	th.quota.left = 2_500_000
	if s := th.render(in+1000, e); s.ExpectedSliceNs != 2_500_000 {
		t.Fatalf("quota shorter: %+v", s)
	}
}

// Off the CPU: a whole quota after a throttle, what was left otherwise.
func TestQuotaOffCPU(t *testing.T) {
	const in = 1_000_000_000
	th := running(in)
	e := env{cont: contention.Thread{Since: 1, LastThrottled: in - 5_000_000}}
	th.quota = quotaState{in: in, quota: 10_000_000, period: 20_000_000, refill: in + 15_000_000, left: 9_000_000}
	th.state, th.switchOut = hintpage.StatePreempted, in+3_000_000
	if s := th.render(in+3_100_000, e); s.ExpectedSliceNs != 6_000_000 || s.Remaining(in+3_100_000) != 6_000_000 {
		t.Fatalf("preempted within the period: %+v", s)
	}
	th.outThrottled = true
	if s := th.render(in+3_100_000, e); s.ExpectedSliceNs != 10_000_000 {
		t.Fatalf("throttled: %+v", s)
	}
}

// The slice is learnt from the co-runners' turns only (the tracker
// says which intervals those are), from runs of 100 µs or more; the
// tick's phase from throttles while running on.
func TestLearnSlice(t *testing.T) {
	const self = 42
	th := running(0)
	c := contention.NewTracker(self)
	c.Add(1, false, 0)
	learn := func(in, off, run uint64, throttled bool, other uint32) {
		ev := &bpf.SchedSwitchEvent{InNs: in, OffNs: off, RunNs: run, Tid: 1, Tgid: 1, Preempted: 1, OtherTgid: other}
		if throttled {
			ev.Throttled = 1
		}
		th.learn(in, off, run, throttled, c.Learn(ev), 1, tick4ms)
	}
	learn(10_000_000, 30_000, 4_000_000, false, self)
	learn(20_000_000, 50_000, 4_000_000, false, 77)
	learn(30_000_000, 5_000_000, 4_000_000, false, 0)
	if th.slice != 0 {
		t.Fatalf("slice %d after the agent's, a short and an idle preemption", th.slice)
	}
	learn(40_000_000, 4_000_000, 3_000_000, false, 77)
	learn(50_000_000, 4_000_000, 50_000, false, 77)
	if th.slice != 3_000_000 || th.switchOut != 46_000_000 {
		t.Fatalf("a co-runner's turns: slice %d switch-out %d", th.slice, th.switchOut)
	}
	// A throttle at a tick feeds the phase; one right at a switch-in does not.
	learn(60_000_000+20_000+8_000_000, 8_000_000, 9_000_000, true, 0)
	learn(80_000_000+3_000_000+8_000_000, 8_000_000, 30_000, true, 0)
	if th.throttles.n != 1 {
		t.Fatalf("%d throttle phases, want 1", th.throttles.n)
	}
}

// A thread the agent's own reader took the CPU from is back at once: its
// slot stays running.
func TestObserveSelfPreemption(t *testing.T) {
	const self = 42
	th := running(1_000)
	st := bpf.SchedThreadStats{SwitchInNs: 1_000, SwitchOutNs: 2_000, OutPreempted: 1, ReplacerTgid: self}
	th.observe(&st, self)
	if th.state != hintpage.StateRunning {
		t.Fatalf("state %d after a preemption by the agent", th.state)
	}
	st.ReplacerTgid = 77
	th.observe(&st, self)
	if th.state != hintpage.StatePreempted || th.switchOut != 2_000 {
		t.Fatalf("state %d switch-out %d after a preemption by another", th.state, th.switchOut)
	}
}

// The mitigation slice is published while the thread contends or its
// contention is not known yet, and not once it has its CPU to itself:
// there the slice changes no wake-up, and a reader would price blocking
// by it.
func TestMitigationOnlyWhereContended(t *testing.T) {
	const in = 1_000_000_000
	e := env{mitigation: 100_000, cont: contention.Thread{Since: in}}
	th := running(in)
	if s := th.render(in+1000, e); s.Contention != hintpage.ContUnknown || s.MitigationNs != 100_000 {
		t.Errorf("just watched: contention %d, mitigation %d", s.Contention, s.MitigationNs)
	}
	if s := th.render(in+contendedFor, e); s.Contention != hintpage.ContFree || s.MitigationNs != 0 {
		t.Errorf("alone: contention %d, mitigation %d", s.Contention, s.MitigationNs)
	}
	e.cont.LastShared, th.slice = in+contendedFor-1000, 3_000_000
	if s := th.render(in+contendedFor, e); s.Contention != hintpage.ContShared || s.MitigationNs != 100_000 {
		t.Errorf("beside a co-runner: contention %d, mitigation %d", s.Contention, s.MitigationNs)
	}
	e.cont.LastShared, e.cont.LastThrottled = 0, in+contendedFor-1000
	if s := th.render(in+contendedFor, e); s.Contention != hintpage.ContThrottled || s.MitigationNs != 100_000 {
		t.Errorf("throttled: contention %d, mitigation %d", s.Contention, s.MitigationNs)
	}
}
