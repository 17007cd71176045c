package openmp

import (
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// engineWith is an engine over a Syncer whose contention source is src,
// and the blocktime b asks for over it.
func engineWith(src signal.ContentionSource, b BlocktimeSetting) (*hybridsync.Engine, *Blocktime) {
	e := hybridsync.NewEngine(hybridsync.New(hybridsync.Config{Contention: src}))
	return e, NewBlocktime(e, b)
}

// settable is a contention source whose verdict the test sets.
type settable struct{ c signal.Contention }

func (s *settable) Contention(int, int64) signal.Contention { return s.c }

// TestBlocktimeFollowsRegime: a thread's blocktime goes to 0 at the first
// report that finds its CPU contended, stays there while the regime
// holds, and goes back to the blocktime of its first look once the
// regime ends (RegimeExit of free verdicts); a thread that cannot set it
// now (cur -1) is told nothing; changes are counted.
func TestBlocktimeFollowsRegime(t *testing.T) {
	const tid = 7
	src := &settable{c: signal.ContentionFree}
	e, bt := engineWith(src, BlocktimeSetting{On: true, FreeMS: -1})
	now := int64(1e9)
	report := func(cur int) int {
		e.Report(tid, nil, now, signal.RunDelay{})
		return bt.Next(tid, now, cur)
	}
	if got := report(200); got != -1 {
		t.Fatalf("first look, free: set %d, want -1 (leave it)", got)
	}
	now += 20e6
	if got := report(200); got != -1 {
		t.Fatalf("free: set %d, want -1", got)
	}
	src.c = signal.ContentionShared
	now += 20e6
	if got := report(-1); got != -1 {
		t.Fatalf("inside a parallel region (cur -1): set %d, want -1", got)
	}
	now += 20e6
	if got := report(200); got != 0 {
		t.Fatalf("contended: set %d, want 0", got)
	}
	now += 100e6
	if got := report(0); got != -1 {
		t.Fatalf("still contended at 0: set %d, want -1", got)
	}
	src.c = signal.ContentionFree
	for i := range 10 {
		now += 100e6
		if got := report(0); got != -1 {
			t.Fatalf("free for %d ms, under hybridsync.RegimeExit: set %d, want -1", (i+1)*100, got)
		}
	}
	now += hybridsync.RegimeExit
	if got := report(0); got != 200 {
		t.Fatalf("free past hybridsync.RegimeExit: set %d, want the first look's 200", got)
	}
	st := bt.Stats()
	if !st.Active || st.Changes != 2 || st.Threads != 1 || st.OriginalMS == nil || *st.OriginalMS != 200 || *st.CurrentMS != 200 {
		t.Errorf("stats %+v (original %v current %v), want active, 2 changes, 1 thread, 200 and 200", st, st.OriginalMS, st.CurrentMS)
	}
}

// accounted is a contention source that also adds up the thread's waits
// for its CPU, as SchedSignal does: each report's window waited share of
// its length.
type accounted struct {
	settable
	waited, span int64
}

func (a *accounted) Waited(int) (int64, int64) { return a.waited, a.span }

func (a *accounted) window(dt int64, share float64) {
	a.span += dt
	a.waited += int64(share * float64(dt))
}

// TestBlocktimeNeedsWaits: where the contention signal accounts for the
// thread's waits, a contended verdict sets 0 only once the thread waited
// blocktimeWaitShare of the time since its last look, over at least
// blocktimeWaitSpan: a late scheduling-in alone (PyTorch's own threads)
// leaves the blocktime, a neighbour that makes it wait half the time
// does not; at 0 it stays while the regime holds, even as the waits fall (a
// thread that sleeps hides them).
func TestBlocktimeNeedsWaits(t *testing.T) {
	const tid = 9
	src := &accounted{settable: settable{c: signal.ContentionFree}}
	e, bt := engineWith(src, BlocktimeSetting{On: true, FreeMS: -1})
	now := int64(1e9)
	report := func(dt int64, share float64, cur int) int {
		now += dt
		src.window(dt, share)
		e.Report(tid, nil, now, signal.RunDelay{})
		return bt.Next(tid, now, cur)
	}
	report(0, 0, 200)
	for i := range 10 {
		src.c = signal.ContentionShared // one late scheduling-in: a shared verdict, 1% of the time waited
		if got := report(200e6, 0.01, 200); got != -1 {
			t.Fatalf("report %d: contended, waited 1%%: set %d, want -1", i, got)
		}
	}
	if got := report(50e6, 0.5, 200); got != -1 {
		t.Fatalf("waited half of 50 ms, under blocktimeWaitSpan: set %d, want -1", got)
	}
	if got := report(60e6, 0.5, 200); got != 0 {
		t.Fatalf("waited half of 110 ms: set %d, want 0", got)
	}
	if got := report(200e6, 0.01, 0); got != -1 {
		t.Fatalf("at 0, still contended, waits hidden: set %d, want -1", got)
	}
	src.c = signal.ContentionFree
	report(100e6, 0, 0)
	if got := report(hybridsync.RegimeExit, 0, 0); got != 200 {
		t.Fatalf("free past hybridsync.RegimeExit: set %d, want 200", got)
	}
}

// TestBlocktimeFreeAfterLauncher: a thread that started with the
// launcher's 0 (its CPUs were contended at start) gets libomp's default
// once they are free, not the 0 of its first look.
func TestBlocktimeFreeAfterLauncher(t *testing.T) {
	const tid = 8
	src := &settable{c: signal.ContentionShared}
	e, bt := engineWith(src, BlocktimeSetting{On: true, FreeMS: libompDefaultBlocktime})
	now := int64(1e9)
	report := func(cur int) int {
		e.Report(tid, nil, now, signal.RunDelay{})
		return bt.Next(tid, now, cur)
	}
	if got := report(0); got != -1 {
		t.Fatalf("contended at the launcher's 0: set %d, want -1", got)
	}
	src.c = signal.ContentionFree
	now += 100e6
	report(0)
	now += hybridsync.RegimeExit + 100e6
	if got := report(0); got != libompDefaultBlocktime {
		t.Fatalf("free past hybridsync.RegimeExit: set %d, want libomp's default %d", got, libompDefaultBlocktime)
	}
}

// TestBlocktimeMinGap: a change follows another no sooner than
// blocktimeMinGap, and the one held back comes at a later report.
func TestBlocktimeMinGap(t *testing.T) {
	const tid = 8
	src := &settable{c: signal.ContentionShared}
	e, bt := engineWith(src, BlocktimeSetting{On: true, FreeMS: -1})
	now := int64(1e9)
	e.Report(tid, nil, now, signal.RunDelay{}) // the thread's first report: no regime yet
	now += 4e6
	e.Report(tid, nil, now, signal.RunDelay{})
	if got := bt.Next(tid, now, 5); got != 0 {
		t.Fatalf("contended: set %d, want 0", got)
	}
	// The program set it back itself at once: held back for the gap.
	now += blocktimeMinGap / 2
	e.Report(tid, nil, now, signal.RunDelay{})
	if got := bt.Next(tid, now, 5); got != -1 {
		t.Fatalf("within blocktimeMinGap of the last change: set %d, want -1", got)
	}
	now += blocktimeMinGap
	e.Report(tid, nil, now, signal.RunDelay{})
	if got := bt.Next(tid, now, 5); got != 0 {
		t.Fatalf("after blocktimeMinGap: set %d, want 0", got)
	}
}

// TestBlocktimeOff: off, or outside the default mode, nothing is set and
// the stats say why.
func TestBlocktimeOff(t *testing.T) {
	src := &settable{c: signal.ContentionShared}
	e, bt := engineWith(src, BlocktimeSetting{Why: "KMP_BLOCKTIME set by the user", FreeMS: -1})
	for i := range 3 {
		now := int64(1e9) + int64(i)*100e6
		e.Report(9, nil, now, signal.RunDelay{})
		if got := bt.Next(9, now, 200); got != -1 {
			t.Fatalf("off: set %d", got)
		}
	}
	if st := bt.Stats(); st.Active || st.Why != "KMP_BLOCKTIME set by the user" || st.Changes != 0 || st.OriginalMS != nil {
		t.Errorf("off: stats %+v", st)
	}
	sp := hybridsync.New(hybridsync.Config{Mode: hybridsync.ModeSpin, Contention: src})
	spe := hybridsync.NewEngine(sp)
	spbt := NewBlocktime(spe, BlocktimeSetting{On: true, FreeMS: -1})
	if st := spbt.Stats(); st.Active || st.Why == "" {
		t.Errorf("spin mode: stats %+v, want inactive and why", st)
	}
}

// TestBlocktimeLiveRules: libomp's blocktime is adapted only where
// kmp_set_blocktime is there and the user fixed nothing; a value
// hybridsync-run set may be adapted.
func TestBlocktimeLiveRules(t *testing.T) {
	cases := []struct {
		env      map[string]string
		callable bool
		runtime  string
		on       bool
		why      string
		free     int
	}{
		{nil, true, "libomp", true, "", -1},
		{nil, false, "libgomp", false, "libgomp: no call changes its spin (under hybridsync-run the library follows it: the stats' spin_live)", -1},
		{nil, false, "none", false, "no OpenMP runtime with kmp_set_blocktime", -1},
		{map[string]string{"KMP_BLOCKTIME": "200"}, true, "libomp", false, "KMP_BLOCKTIME set by the user", -1},
		{map[string]string{"KMP_BLOCKTIME": ""}, true, "libomp", false, "KMP_BLOCKTIME set by the user", -1},
		{map[string]string{"OMP_WAIT_POLICY": "active"}, true, "libomp", false, "OMP_WAIT_POLICY set by the user", -1},
		{map[string]string{"KMP_BLOCKTIME": "0", hybridsync.EnvRunSet: "GOMP_SPINCOUNT=1000 KMP_BLOCKTIME=0"}, true, "libomp", true, "", 200},
		{map[string]string{"KMP_BLOCKTIME": "5", hybridsync.EnvRunSet: "GOMP_SPINCOUNT=1000"}, true, "libomp", false, "KMP_BLOCKTIME set by the user", -1},
		{map[string]string{"HYBRIDSYNC_OPENMP": "default"}, true, "libomp", false, "HYBRIDSYNC_OPENMP=default", -1},
	}
	for _, c := range cases {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		cfg, err := hybridsync.ParseConfig(func(k string) string { return c.env[k] }, hybridsync.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		b := BlocktimeLive(lookup, cfg.OpenMP, c.callable, c.runtime)
		if b.On != c.on || b.Why != c.why || b.FreeMS != c.free {
			t.Errorf("%v, callable %v, %s: %+v, want %v %q free %d", c.env, c.callable, c.runtime, b, c.on, c.why, c.free)
		}
	}
}
