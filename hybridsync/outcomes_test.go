package hybridsync

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
)

// switchable is a ContentionSource a test can change.
type switchable struct{ c atomic.Int64 }

func (s *switchable) Contention(int, int64) Contention { return Contention(s.c.Load()) }

// world simulates a thread whose waits complete at rate[arm] per second
// (and cost cpu[arm] ns of CPU each), with multiplicative noise per epoch:
// it runs the plans o gives as the C library does (api.c).
type world struct {
	o         *Outcomes
	rate, cpu [arms]float64
	waitShare float64 // of each epoch's wall time, inside waits
	noise     float64
	rng       *rand.Rand
	now       int64
	waits     float64 // completed, total
	byArm     [arms]float64
	e         Epoch
	reports   int
}

func newWorld(cont ContentionSource, seed uint64) *world {
	w := &world{o: newOutcomes(cont), rng: rand.New(rand.NewPCG(seed, 1)), now: 1e9, waitShare: 0.5}
	w.e = w.o.Report(7, nil, w.now)
	return w
}

// run advances the world by at least d ns, a whole plan at a time.
func (w *world) run(d int64) {
	for end := w.now + d; w.now < end; {
		w.step()
	}
}

// step runs the plan: its epochs back to back, each extended by Len/4 at
// a time while it has fewer than MinWaits waits (up to MaxLen), and
// reports them.
func (w *world) step() {
	var done []EpochDone
	for _, a := range w.e.Arms[:w.e.N] {
		var ep EpochDone
		var n, cpu float64
		for dt := w.e.Len; ; dt = w.e.Len / 4 {
			for left := dt; left > 0; left -= epochLen { // noise per 50 ms at most
				c := min(left, epochLen)
				k := w.rate[a] * (1 + w.noise*(2*w.rng.Float64()-1)) * float64(c) / 1e9
				w.waits += k
				n += k
				cpu += k * w.cpu[a]
			}
			w.now += dt
			w.byArm[a] += float64(dt)
			ep.Wall += dt
			if uint64(n) >= w.e.MinWaits || ep.Wall >= w.e.MaxLen {
				break
			}
		}
		ep.Waits, ep.CPU, ep.Blockable = uint64(n), int64(cpu), int64(w.waitShare*float64(ep.Wall))
		done = append(done, ep)
	}
	w.e = w.o.Report(7, done, w.now)
	w.reports++
}

func TestOutcomesFreeNeverExplores(t *testing.T) {
	for _, c := range []Contention{ContentionFree, ContentionUnknown} {
		w := newWorld(FixedContention(c), 1)
		w.rate = [arms]float64{1000, 2000, 2000}
		w.run(10e9)
		st := w.o.Stats()
		if w.byArm[ArmDevice]+w.byArm[ArmPolicy] != 0 || st.Explorations != 0 {
			t.Errorf("%v: %.0f ns in the device arm, %.0f in the policy arm, %d explorations; want only the model",
				c, w.byArm[ArmDevice], w.byArm[ArmPolicy], st.Explorations)
		}
		if w.e.N != 1 || w.e.Arms[0] != ArmModel || w.e.Len != freeReport || w.e.MinWaits != 0 {
			t.Errorf("%v: next epochs %+v, want one of the model, reported after %d ns", c, w.e, freeReport)
		}
	}
}

// TestOutcomesFreeShortWaitsOnDevice: alone, a thread whose waits are too
// short for anything but spinning runs the device arm (which equals the
// model's for such waits, without observing launches), and is back in the
// model at the next report once its waits grow; nothing is explored.
func TestOutcomesFreeShortWaitsOnDevice(t *testing.T) {
	w := newWorld(FixedContention(ContentionFree), 1)
	w.waitShare = 0.01
	w.run(1e9)
	if st := w.o.Stats(); w.e.Arms[0] != ArmDevice || st.Settled != 1 || st.Explorations != 0 || w.byArm[ArmPolicy] != 0 {
		t.Errorf("free, waits 1%% of the time: next arm %v, %d settled, %d explorations, %.2fs in the policy arm; want the device arm, settled once, no exploration",
			w.e.Arms[0], st.Settled, st.Explorations, w.byArm[ArmPolicy]/1e9)
	}
	w.waitShare = 0.5
	w.step()
	if w.e.Arms[0] != ArmModel || w.e.Len != freeReport {
		t.Errorf("free, waits now half the time: next epochs %+v, want the model's", w.e)
	}
}

// TestOutcomesQuietOnlyFromRunDelay: a free thread may skip its reports
// (Epoch.Quiet) only where the verdict comes from its run delay, which the
// caller can check without Go; never once contended.
func TestOutcomesQuietOnlyFromRunDelay(t *testing.T) {
	sw := &switchable{}
	for _, tc := range []struct {
		name string
		cont ContentionSource
		want int64
	}{
		{"schedstat", &SchedSignal{}, freeQuiet},
		{"fixed", FixedContention(ContentionFree), 0},
		{"switchable", sw, 0},
	} {
		o := newOutcomes(tc.cont)
		o.Report(7, nil, 1e9)
		e := o.Report(7, done(10), 1e9+samplePeriod)
		if e.Quiet != tc.want || e.Arms[0] != ArmModel {
			t.Errorf("%s, free: %+v, want the model arm and quiet %d", tc.name, e, tc.want)
		}
		if want := min(tc.want, sharedDelayPerRun/2); e.QuietPerRun != want {
			t.Errorf("%s, free, no quota: quiet below %d ns of run delay per run, want %d", tc.name, e.QuietPerRun, want)
		}
	}
	// Under a quota, a throttle spread over many wake-ups must reach Go.
	o := newOutcomes(quotaFree{})
	o.quiet = freeQuiet
	o.Report(7, nil, 1e9)
	if e := o.Report(7, done(10), 1e9+samplePeriod); e.Quiet != freeQuiet || e.QuietPerRun != 0 {
		t.Errorf("free under a quota: %+v, want quiet reports judged by the delay's fraction alone", e)
	}
	o = newOutcomes(sw)
	o.quiet = freeQuiet // as if from the run delay
	o.Report(7, nil, 1e9)
	sw.c.Store(int64(ContentionShared))
	if e := o.Report(7, done(10), 1e9+samplePeriod); e.Quiet != 0 {
		t.Errorf("contended: %+v, want no quiet reports", e)
	}
}

// quotaFree is a free CPU whose process has a CPU quota (20 ms period).
type quotaFree struct{}

func (quotaFree) Contention(int, int64) Contention { return ContentionFree }
func (quotaFree) QuotaPeriod() int64               { return 20_000_000 }

// quotaShared is a contended CPU whose process has a CPU quota period.
type quotaShared struct{ period int64 }

func (quotaShared) Contention(int, int64) Contention { return ContentionShared }
func (q quotaShared) QuotaPeriod() int64             { return q.period }

// done is one epoch's report of n waits.
func done(n uint64) []EpochDone {
	return []EpochDone{{Waits: n, Wall: samplePeriod, Blockable: samplePeriod / 2}}
}

// plans runs o's plans from a thread's first report, each epoch lasting
// its Len with waits[arm] waits, and returns the first n.
func plans(o *Outcomes, waits [arms]uint64, n int) []Epoch {
	now := int64(1e9)
	e := o.Report(1, nil, now)
	got := []Epoch{e}
	for len(got) < n {
		var d []EpochDone
		for _, a := range e.Arms[:e.N] {
			now += e.Len
			d = append(d, EpochDone{Waits: waits[a], Wall: e.Len, Blockable: e.Len / 2})
		}
		e = o.Report(1, d, now)
		got = append(got, e)
	}
	return got
}

// TestOutcomesEpochsFitQuota: under a CPU quota every epoch spans whole
// periods, so that each holds the same quota whatever its phase.
func TestOutcomesEpochsFitQuota(t *testing.T) {
	for _, tc := range []struct {
		period           int64
		explore, exploit int64
	}{
		{0, exploreLen, epochLen},
		{20_000_000, 20_000_000, 60_000_000},
		{30_000_000, 30_000_000, 60_000_000},
		{100_000_000, 100_000_000, 100_000_000},
	} {
		// The model's first epoch, the exploration, the chosen arm's run.
		p := plans(newOutcomes(quotaShared{tc.period}), [arms]uint64{ArmDevice: 50, ArmPolicy: 100}, 3)
		if p[1].N != 4 || p[1].Len != tc.explore || p[2].Arms[0] != ArmPolicy || p[2].Len%tc.exploit != 0 {
			t.Errorf("quota period %d ns: exploring %+v, then %+v; want epochs of %d ns exploring, whole %d ns after", tc.period, p[1], p[2], tc.explore, tc.exploit)
		}
	}
}

// TestOutcomesOneReportPerPlan: on a contended CPU a thread reports once
// per exploration and once per run of the chosen arm, not per epoch
// (Epoch says why), and only exploring epochs wait for enough waits to
// give a rate.
func TestOutcomesOneReportPerPlan(t *testing.T) {
	w := newWorld(FixedContention(ContentionShared), 9)
	w.rate = [arms]float64{1000, 1000, 1500}
	w.run(10e9)
	st := w.o.Stats()
	if w.reports > 2*int(st.Explorations)+2 {
		t.Errorf("%d reports for %d explorations, want at most two per exploration", w.reports, st.Explorations)
	}
	for _, e := range plans(newOutcomes(FixedContention(ContentionShared)), [arms]uint64{ArmDevice: 1, ArmPolicy: 1}, 4)[1:] {
		exploring := e.N == 4
		if exploring != (e.MinWaits == minEpochWaits && e.MaxLen == maxEpoch) {
			t.Errorf("plan %+v: want a minimum of waits per epoch exactly when exploring", e)
		}
	}
}

// TestOutcomesRegret: on a contended CPU, whichever arm is better and by
// however much, the thread completes at least 97% of the waits the better
// arm alone would have (regret bounded against the best fixed mode), with
// noise of ±5% per epoch.
func TestOutcomesRegret(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		w := newWorld(FixedContention(ContentionShared), seed)
		gap := 0.6 * w.rng.Float64()
		w.rate[ArmDevice], w.rate[ArmPolicy] = 2000, 2000*(1-gap)
		if seed%2 == 0 {
			w.rate[ArmDevice], w.rate[ArmPolicy] = w.rate[ArmPolicy], w.rate[ArmDevice]
		}
		w.cpu = [arms]float64{1e5, 3e5, 1e5}
		w.noise = 0.05
		start := w.now
		w.run(20e9)
		best := max(w.rate[ArmDevice], w.rate[ArmPolicy]) * float64(w.now-start) / 1e9
		if got := w.waits / best; got < 0.97 {
			t.Errorf("seed %d, gap %.3f: %.3f of the better arm's waits, want >= 0.97 (device %.1fs, policy %.1fs, model %.1fs)",
				seed, gap, got, w.byArm[ArmDevice]/1e9, w.byArm[ArmPolicy]/1e9, w.byArm[ArmModel]/1e9)
		}
	}
}

// TestOutcomesShortWaitsNotExplored: on a contended CPU, a thread whose
// waits take under exploreShare of its time keeps to CUDA's default
// without exploring (blocking could not gain more), reporting once per
// settledRun epochs; once its waits grow, it explores.
func TestOutcomesShortWaitsNotExplored(t *testing.T) {
	w := newWorld(FixedContention(ContentionShared), 4)
	w.rate = [arms]float64{1000, 1000, 1020}
	w.waitShare = 0.02
	w.run(10e9)
	st := w.o.Stats()
	if st.Explorations != 0 || w.byArm[ArmPolicy] != 0 || st.Settled == 0 {
		t.Errorf("waits 2%% of the time: %d explorations, %.2fs in the policy arm, %d settled runs; want none, none, some",
			st.Explorations, w.byArm[ArmPolicy]/1e9, st.Settled)
	}
	if max := 10e9/(settledRun*epochLen) + 2; w.reports > int(max) {
		t.Errorf("%d reports in 10 s, want at most %d", w.reports, int(max))
	}
	w.waitShare = 0.2
	w.run(2 * settledRun * epochLen)
	if st := w.o.Stats(); st.Explorations == 0 {
		t.Errorf("waits 20%% of the time: no exploration after %d ms", 2*settledRun*epochLen/1_000_000)
	}
}

// TestOutcomesPolicyConfirmed: a small gap in the policy arm's favour is
// taken when two explorations in a row find it, a large one at once, and
// under a CPU quota (whose bias is to the device arm) at once.
func TestOutcomesPolicyConfirmed(t *testing.T) {
	for _, tc := range []struct {
		cont     ContentionSource
		policy   uint64 // waits per epoch; the device arm's: 100
		deferred uint64
	}{
		{FixedContention(ContentionShared), 110, 1},
		{FixedContention(ContentionShared), 150, 0},
		{quotaShared{20_000_000}, 110, 0},
	} {
		o := newOutcomes(tc.cont)
		p := plans(o, [arms]uint64{ArmDevice: 100, ArmPolicy: tc.policy}, 5)
		// The model's epoch, an exploration, a run, an exploration, a run.
		first, second := p[2].Arms[0], p[4].Arms[0]
		if d := o.Stats().Deferred; d != tc.deferred || second != ArmPolicy || (tc.deferred == 1) != (first == ArmDevice) {
			t.Errorf("%T: policy %d waits to the device's 100: runs of %v then %v, %d deferred; want %d deferred, then the policy",
				tc.cont, tc.policy, first, second, d, tc.deferred)
		}
	}
}

// TestOutcomesTieGoesToLessCPU: arms equally fast, the one that burns less
// CPU per wait is kept.
func TestOutcomesTieGoesToLessCPU(t *testing.T) {
	for _, cheap := range []Arm{ArmDevice, ArmPolicy} {
		w := newWorld(FixedContention(ContentionThrottled), 3)
		w.rate = [arms]float64{1000, 1000, 1000}
		w.cpu = [arms]float64{4e5, 4e5, 4e5}
		w.cpu[cheap] = 1e5
		w.run(10e9)
		st := w.o.Stats()
		if st.Chosen[cheap.String()] == 0 || st.Chosen[(ArmDevice+ArmPolicy-cheap).String()] != 0 {
			t.Errorf("cheaper arm %v: chosen %v", cheap, st.Chosen)
		}
	}
}

// TestOutcomesExplorationOrder: ABBA, then BAAB, with the better arm
// between.
func TestOutcomesExplorationOrder(t *testing.T) {
	var got []Arm
	var lens []int64
	for _, e := range plans(newOutcomes(FixedContention(ContentionShared)), [arms]uint64{100, 100, 100}, 5)[1:] {
		got = append(got, e.Arms[:e.N]...)
		lens = append(lens, e.Len)
	}
	// The first report in the regime starts the exploration; the
	// device arm is made faster in no epoch (same waits), so the tie
	// goes to the arm with less CPU: both 0, the policy, but only once a
	// second exploration finds it too (the device arm runs deferRun
	// epochs between), then for minExploit epochs.
	want := []Arm{ArmPolicy, ArmDevice, ArmDevice, ArmPolicy, ArmDevice, ArmDevice, ArmPolicy, ArmPolicy, ArmDevice, ArmPolicy}
	if !slices.Equal(got, want) || lens[1] != deferRun*epochLen || lens[3] != minExploit*epochLen {
		t.Errorf("arms %v, plan lengths %v; want %v, runs of %d and %d ns", got, lens, want, deferRun*epochLen, minExploit*epochLen)
	}
}

// TestOutcomesRegimeExit: after contention goes, the thread keeps to the
// contended arms for regimeExit and leaves soon after (at most a run of
// the chosen arm, an exploration and exitCheck epochs later); when
// contention returns, the last decision resumes without a new exploration.
func TestOutcomesRegimeExit(t *testing.T) {
	src := &switchable{}
	src.c.Store(int64(ContentionShared))
	w := newWorld(src, 5)
	w.rate = [arms]float64{1000, 1000, 3000}
	for w.e.N != 1 || w.e.Arms[0] != ArmPolicy {
		w.step() // to the first run of the policy arm, the faster
	}
	src.c.Store(int64(ContentionFree))
	gone := w.now
	for w.e.Arms[0] != ArmModel {
		w.step()
	}
	late := int64(maxExploit*epochLen + 4*exploreLen + exitCheck*epochLen)
	if d := w.now - gone; d < regimeExit || d > regimeExit+late {
		t.Errorf("back to the model %d ms after contention went, want %d-%d ms", d/1_000_000, regimeExit/1_000_000, (regimeExit+late)/1_000_000)
	}
	before := w.o.Stats().Explorations
	src.c.Store(int64(ContentionShared))
	w.step()
	if w.e.Arms[0] != ArmPolicy || w.o.Stats().Explorations != before {
		t.Errorf("contended again: %+v, explorations %d -> %d; want the last decision resumed", w.e, before, w.o.Stats().Explorations)
	}
}

// TestOutcomesThreadsIndependent: each thread has its own epochs; reports
// from many threads at once are safe (-race).
func TestOutcomesThreadsIndependent(t *testing.T) {
	o := newOutcomes(FixedContention(ContentionShared))
	finished := make(chan struct{})
	for tid := 1; tid <= 8; tid++ {
		go func() {
			defer func() { finished <- struct{}{} }()
			now := int64(1e9)
			for range 200 {
				o.Report(tid, done(50), now)
				now += epochLen
			}
		}()
	}
	for range 8 {
		<-finished
	}
	if st := o.Stats(); st.Explorations < 8 {
		t.Errorf("%d explorations over 8 threads, want each thread's own", st.Explorations)
	}
}
