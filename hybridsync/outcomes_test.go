package hybridsync

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// switchable is a ContentionSource a test can change.
type switchable struct{ c atomic.Int64 }

func (s *switchable) Contention(int, int64) Contention { return Contention(s.c.Load()) }

// world simulates a thread whose waits complete at rate[arm] per second
// (and cost cpu[arm] ns of CPU each), with multiplicative noise per epoch:
// it reports to o as the C library would, when told to.
type world struct {
	o          *Outcomes
	rate, cpu  [arms]float64
	noise      float64
	rng        *rand.Rand
	now, cpuNs int64
	waits      float64 // completed, total
	byArm      [arms]float64
	e          Epoch
}

func newWorld(cont ContentionSource, seed uint64) *world {
	w := &world{o: newOutcomes(cont), rng: rand.New(rand.NewPCG(seed, 1)), now: 1e9}
	w.e = w.o.Report(7, 0, w.now, 0)
	return w
}

// run advances the world by d ns, reporting every time the last answer
// asked for.
func (w *world) run(d int64) {
	end := w.now + d
	var n float64 // waits in the current epoch
	for w.now < end {
		dt := w.e.Next
		f := 1 + w.noise*(2*w.rng.Float64()-1)
		k := w.rate[w.e.Arm] * f * float64(dt) / 1e9
		w.now += dt
		w.cpuNs += int64(k * w.cpu[w.e.Arm])
		n += k
		w.waits += k
		w.byArm[w.e.Arm] += float64(dt)
		e := w.o.Report(7, uint64(n), w.now, w.cpuNs)
		if e.Reset {
			n = 0
		}
		w.e = e
	}
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
		if w.e.Next != freeReport || !w.e.Reset {
			t.Errorf("%v: next report in %d ns (reset %v), want every %d ns", c, w.e.Next, w.e.Reset, freeReport)
		}
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
		o.Report(7, 0, 1e9, 0)
		e := o.Report(7, 10, 1e9+samplePeriod, 0)
		if e.Quiet != tc.want || e.Arm != ArmModel {
			t.Errorf("%s, free: %+v, want the model arm and quiet %d", tc.name, e, tc.want)
		}
		if want := min(tc.want, sharedDelayPerRun/2); e.QuietPerRun != want {
			t.Errorf("%s, free, no quota: quiet below %d ns of run delay per run, want %d", tc.name, e.QuietPerRun, want)
		}
	}
	// Under a quota, a throttle spread over many wake-ups must reach Go.
	o := newOutcomes(quotaFree{})
	o.quiet = freeQuiet
	o.Report(7, 0, 1e9, 0)
	if e := o.Report(7, 10, 1e9+samplePeriod, 0); e.Quiet != freeQuiet || e.QuietPerRun != 0 {
		t.Errorf("free under a quota: %+v, want quiet reports judged by the delay's fraction alone", e)
	}
	o = newOutcomes(sw)
	o.quiet = freeQuiet // as if from the run delay
	o.Report(7, 0, 1e9, 0)
	sw.c.Store(int64(ContentionShared))
	if e := o.Report(7, 10, 1e9+samplePeriod, 0); e.Quiet != 0 {
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

// explorationArms reports epochs of 25 ms with waits[arm] waits each and
// returns the arms of the first n epochs after the regime begins, and
// their lengths.
func explorationArms(o *Outcomes, waits [arms]uint64, n int) ([]Arm, []int64) {
	now := int64(1e9)
	e := o.Report(1, 0, now, 0)
	var got []Arm
	var next []int64
	for range n {
		now += e.Next
		e = o.Report(1, waits[e.Arm], now, 0)
		got = append(got, e.Arm)
		next = append(next, e.Next)
	}
	return got, next
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
		arms, next := explorationArms(newOutcomes(quotaShared{tc.period}), [arms]uint64{ArmDevice: 50, ArmPolicy: 100}, 5)
		// Epochs 1-4 explore; epoch 5 is the first of the chosen arm.
		if next[0] != tc.explore || next[4] != tc.exploit || arms[4] != ArmPolicy {
			t.Errorf("quota period %d ns: arms %v, epochs of %v ns; want %d ns exploring, %d ns after", tc.period, arms, next, tc.explore, tc.exploit)
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
	o := newOutcomes(FixedContention(ContentionShared))
	now := int64(1e9)
	o.Report(1, 0, now, 0)
	var got []Arm
	for i := 0; i < 4+minExploit+4+1; i++ {
		now += epochLen
		e := o.Report(1, 100, now, 0)
		got = append(got, e.Arm)
	}
	// The first report in the regime starts the exploration; the
	// device arm is made faster in no epoch (same waits), so the tie
	// goes to the arm with less CPU: both 0, the policy.
	want := []Arm{ArmPolicy, ArmDevice, ArmDevice, ArmPolicy}
	for range minExploit {
		want = append(want, ArmPolicy)
	}
	want = append(want, ArmDevice, ArmPolicy, ArmPolicy, ArmDevice, ArmPolicy)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("arms %v, want %v", got, want)
		}
	}
}

// TestOutcomesShortEpochsExtend: too few waits, the epoch goes on (no
// reset) until maxEpoch.
func TestOutcomesShortEpochsExtend(t *testing.T) {
	o := newOutcomes(FixedContention(ContentionShared))
	now := int64(1e9)
	o.Report(1, 0, now, 0)
	now += samplePeriod
	e := o.Report(1, 1, now, 0)
	arm := e.Arm
	for now += epochLen; ; now += e.Next {
		e = o.Report(1, 2, now, 0)
		if e.Reset {
			break
		}
		if e.Arm != arm {
			t.Fatalf("arm changed without a reset")
		}
	}
	if now < 1e9+samplePeriod+maxEpoch {
		t.Errorf("an epoch of 2 waits ended after %d ns, want maxEpoch", now-1e9-samplePeriod)
	}
}

// TestOutcomesRegimeExit: after contention goes, the thread keeps its arm
// for regimeExit, then returns to the model; when contention returns, the
// last decision resumes without a new exploration.
func TestOutcomesRegimeExit(t *testing.T) {
	src := &switchable{}
	src.c.Store(int64(ContentionShared))
	w := newWorld(src, 5)
	w.rate = [arms]float64{1000, 1000, 3000}
	w.run(1e9) // an exploration, then 16 of the 64 epochs it grants the policy
	if w.e.Arm != ArmPolicy {
		t.Fatalf("contended: arm %v, want the faster policy arm", w.e.Arm)
	}
	src.c.Store(int64(ContentionFree))
	w.run(regimeExit - epochLen)
	if w.e.Arm != ArmPolicy {
		t.Fatalf("free for less than regimeExit: arm %v, want policy kept", w.e.Arm)
	}
	w.run(3 * epochLen)
	if w.e.Arm != ArmModel {
		t.Fatalf("free for regimeExit: arm %v, want model", w.e.Arm)
	}
	before := w.o.Stats().Explorations
	src.c.Store(int64(ContentionShared))
	w.run(2 * samplePeriod)
	if w.e.Arm != ArmPolicy || w.o.Stats().Explorations != before {
		t.Errorf("contended again: arm %v, explorations %d -> %d; want the last decision resumed", w.e.Arm, before, w.o.Stats().Explorations)
	}
}

// TestOutcomesThreadsIndependent: each thread has its own epochs; reports
// from many threads at once are safe (-race).
func TestOutcomesThreadsIndependent(t *testing.T) {
	o := newOutcomes(FixedContention(ContentionShared))
	done := make(chan struct{})
	for tid := 1; tid <= 8; tid++ {
		go func() {
			defer func() { done <- struct{}{} }()
			now := int64(1e9)
			for range 200 {
				o.Report(tid, 50, now, 0)
				now += epochLen
			}
		}()
	}
	for range 8 {
		<-done
	}
	if st := o.Stats(); st.Explorations < 8 {
		t.Errorf("%d explorations over 8 threads, want each thread's own", st.Explorations)
	}
}
