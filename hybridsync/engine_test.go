package hybridsync

import (
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// TestPlanRoutes: each arm reaches the caller as the routes that make it
// (docs/libhybridsync.md, "How a wait runs"), with the plan's numbers.
func TestPlanRoutes(t *testing.T) {
	want := map[Arm]Step{
		ArmModel:    {Event: RouteModel, Other: RouteModel, EventUnswitched: RouteModel, OtherUnswitched: RouteModel},
		ArmDevice:   {Event: RouteDevice, Other: RouteDevice, EventUnswitched: RouteDevice, OtherUnswitched: RouteDevice},
		ArmPolicy:   {Blocking: true, Event: RouteShadow, Other: RouteDevice, EventUnswitched: RoutePolicy, OtherUnswitched: RoutePolicy},
		ArmBlocking: {Blocking: true, Event: RouteDevice, Other: RouteDevice, EventUnswitched: RoutePolicy, OtherUnswitched: RoutePolicy},
	}
	for a, st := range want {
		e := epochPlan{N: 2, Len: 40_000_000, MinWaits: 8, MaxLen: 500_000_000, Quiet: 7, QuietFrac: 0.5, QuietPerRun: 9}
		e.Arms[0], e.Arms[1] = a, ArmDevice
		p := e.plan()
		if p.Steps[0] != st || p.Steps[1] != want[ArmDevice] || p.N != 2 {
			t.Errorf("%v: steps %+v, want %+v then the device arm's", a, p.Steps[:p.N], st)
		}
		if p.Len != e.Len || p.Extend != e.Len/4 || p.MinWaits != 8 || p.MaxLen != e.MaxLen || p.Quiet != 7 ||
			p.QuietFrac != 0.5 || p.QuietPerRun != 9 || p.BlockCost != blockCost {
			t.Errorf("%v: plan %+v does not carry the epochs' numbers %+v", a, p, e)
		}
	}
	if p := DevicePlan(); p.N != 1 || p.Steps[0] != want[ArmDevice] || p.Len <= 0 {
		t.Errorf("DevicePlan: %+v", p)
	}
}

// TestReportTakesCallersRunDelay: a report's contention verdict is drawn
// from the run delay its caller read (for a thread whose schedstat the
// signal could not read itself): flat, a free plan whose quiet check is
// the signal's own rule; 60% of a window waiting, 1.5 ms per
// scheduling-in, contention, and an exploration.
func TestReportTakesCallersRunDelay(t *testing.T) {
	const tid = 1 << 30 // no such thread: the signal cannot read one itself
	s := New(Config{})
	e := NewEngine(s)
	now := int64(1e9)
	e.Report(tid, nil, now, signal.RunDelay{Delay: 1e6, Runs: 10, OK: true})
	now += signal.SamplePeriod
	p := e.Report(tid, []EpochDone{{Waits: 10, Wall: signal.SamplePeriod, Blockable: signal.SamplePeriod / 2}}, now,
		signal.RunDelay{Delay: 1e6, Runs: 12, OK: true})
	perRun := int64(signal.SharedDelayPerRun)
	if e.chooser.period() > 0 {
		perRun = 0 // under a CPU quota only the fraction counts (armChooser.free)
	}
	if p.N != 1 || p.Steps[0].Event != RouteModel || p.Quiet != freeQuiet || p.QuietFrac != signal.SharedDelayFrac || p.QuietPerRun != perRun {
		t.Errorf("flat run delay: plan %+v, want the model's, quiet by the signal's rule", p)
	}
	now += 10_000_000
	p = e.Report(tid, []EpochDone{{Waits: 10, Wall: 10_000_000, Blockable: 5_000_000}}, now,
		signal.RunDelay{Delay: 1e6 + 6_000_000, Runs: 16, OK: true})
	if c := s.cont.Contention(tid, now); c != signal.ContentionShared {
		t.Errorf("60%% of the window in run delay, 1.5 ms per run: %v, want shared", c)
	}
	if p.N != 4 || p.MinWaits == 0 {
		t.Errorf("contended: plan %+v, want an exploration", p)
	}
	if d := e.Delegation(); !d.On || d.Short != ShortWait || d.DoneAtStart <= 0 {
		t.Errorf("Delegation: %+v", d)
	}
	if d := NewEngine(New(Config{Mode: ModeSpin})).Delegation(); d.On {
		t.Errorf("spin mode delegates: %+v", d)
	}
}
