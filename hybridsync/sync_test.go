package hybridsync_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
)

// flaky wraps a simulated event and injects descheduling: Query and Wait
// sometimes stall the calling thread, as a hypervisor taking the vCPU away
// would, at the worst moments for the policy.
type flaky struct {
	*simdev.Event
	rng   *rand.Rand
	stall time.Duration
	mu    sync.Mutex
}

func (f *flaky) maybeStall() {
	f.mu.Lock()
	stall := f.rng.IntN(20) == 0
	f.mu.Unlock()
	if stall {
		time.Sleep(f.stall)
	}
}

func (f *flaky) Query() (bool, error) {
	f.maybeStall()
	return f.Event.Query()
}

func (f *flaky) Wait() error {
	err := f.Event.Wait()
	f.maybeStall()
	return err
}

var errDevice = errors.New("simulated device fault")

// TestSyncNeverReturnsEarly is the one invariant as a property: for every
// policy, over random kernel durations, thread counts, failures and
// injected descheduling, Sync returns only after completion and returns the
// device's error unchanged.
func TestSyncNeverReturnsEarly(t *testing.T) {
	for _, name := range hybridsync.Modes() {
		mode, _ := hybridsync.ParseMode(name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for seed := uint64(1); seed <= 4; seed++ {
				checkSchedule(t, mode, seed)
			}
		})
	}
}

func checkSchedule(t *testing.T, mode hybridsync.Mode, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(mode)))
	threads := 1 + rng.IntN(4)
	dev := simdev.New(1 + rng.IntN(3))
	dev.InterruptDelay = time.Duration(rng.IntN(50)) * time.Microsecond
	s := hybridsync.New(hybridsync.Config{Mode: mode, Threshold: thresholds[rng.IntN(len(thresholds))]()})
	var wg sync.WaitGroup
	for th := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(th)))
			for i := range 40 {
				k := hybridsync.KernelID(1 + r.IntN(3))
				d := time.Duration(r.IntN(800)) * time.Microsecond
				var want error
				if r.IntN(10) == 0 {
					want = fmt.Errorf("step %d: %w", i, errDevice)
				}
				ev := &flaky{Event: dev.LaunchFailing(th, d, want), rng: rand.New(rand.NewPCG(seed, uint64(i))), stall: time.Duration(r.IntN(3)) * time.Millisecond}
				// Half the waits learn as from a CUDA event, from their own
				// queries only (upper bounds, forgetting).
				var sev hybridsync.Event = ev
				if r.IntN(2) == 0 {
					sev = untimed{ev}
				}
				err := s.Sync(sev, k)
				now := clock.Now()
				done, _ := ev.CompletedAt()
				if now < done {
					t.Errorf("%v seed %d: Sync returned %v before completion", mode, seed, time.Duration(done-now))
				}
				if err != want {
					t.Errorf("%v seed %d: Sync returned %v, device said %v", mode, seed, err, want)
				}
			}
		}()
	}
	wg.Wait()
}

var thresholds = []func() signal.ThresholdSource{
	func() signal.ThresholdSource { return signal.Unbounded },
	func() signal.ThresholdSource { return signal.Static(0) },
	func() signal.ThresholdSource { return signal.Static(200_000) },
	func() signal.ThresholdSource { return &signal.GuestEstimator{} },
}

// TestHybridStopsBlockingOnceLearned: once a steady kernel is learned,
// hybrid stops blocking; it sleeps until just before completion and spins,
// or, when its timer wake-ups are measured too late for that (a loaded
// machine), spins.
func TestHybridStopsBlockingOnceLearned(t *testing.T) {
	dev := simdev.New(1)
	s := hybridsync.New(hybridsync.Config{Threshold: signal.Unbounded, Contention: free})
	const k = 7
	for range 200 {
		if err := s.Sync(dev.Launch(0, 500*time.Microsecond), k); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats(nil)
	if st.Calls != 200 {
		t.Fatalf("calls = %d, want 200", st.Calls)
	}
	// The policy sleeps first only when its timer wake-ups are early
	// enough to be back before a 500 µs kernel ends; on a machine so
	// loaded that they are not, blocking is the right answer.
	if lead := st.TimerLateP75US; lead < 300 {
		if st.Blocks > 20 {
			t.Errorf("%d of 200 waits blocked; want only the warm-up ones; stats %+v", st.Blocks, st)
		}
		if st.SleepSpinHits < 150 {
			t.Errorf("timer wakes %.0f µs late, yet only %d of 200 waits slept first; stats %+v", lead, st.SleepSpinHits, st)
		}
	} else {
		t.Logf("timer wake-ups %.0f µs late (p75): too loaded to check the policy's choice", lead)
	}
	if m := st.Kernels[0].MeanUS; m < 490 || m > 600 {
		t.Errorf("learned mean %.1f µs for a 500 µs kernel", m)
	}
}

// untimed hides the simulated event's exact completion time, as a CUDA
// event does: Sync learns from its own queries only.
type untimed struct{ hybridsync.Event }

// TestHybridForgetsWrongTiming: a kernel learned far too long (50 ms, as
// from records the interposer never saw) that now takes 300 µs costs a few
// long sleeps, not dozens: three waits in a row that find the work done at
// their wake-up make the timing be forgotten and learned afresh (4 waits).
// Without, the mean comes down by well under 1 ms in 30 waits. A machine
// that keeps the thread from its CPU after its first sleep's timer fires
// makes that wake-up late by as long, and the policy rightly stops
// sleeping where wake-ups are that late: the test then skips, naming the
// thread's measured run delay.
func TestHybridForgetsWrongTiming(t *testing.T) {
	runtime.LockOSThread() // the Syncs run on this thread, which is watched
	defer runtime.UnlockOSThread()
	w := disturbance.Start(unix.Gettid())
	dev := simdev.New(1)
	s := hybridsync.New(hybridsync.Config{Threshold: signal.Unbounded, Contention: free})
	const k = 9
	for range 20 {
		s.Dict().Update(k, 50_000_000)
	}
	for i := range 30 {
		if err := s.Sync(untimed{dev.Launch(0, 300*time.Microsecond)}, k); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Dict().Lookup(k); got.N > 0 && got.Mean < 2_000_000 {
			t.Logf("relearned after %d waits: %+v", i+1, got)
			return
		}
	}
	got, _ := s.Dict().Lookup(k)
	st := s.Stats(nil)
	w.Stop().Check(t, 0.05, fmt.Sprintf("after 30 waits of a 300 µs kernel learned as 50 ms: mean %.1f ms, %+v (timer wake-ups %.0f µs late at p75, %d waits slept)",
		float64(got.Mean)/1e6, got, st.TimerLateP75US, st.SleepSpinHits))
}

// TestHybridSpinsShortKernels: a kernel too short to sleep through, and
// shorter than what a blocking wait costs, is spun for, not blocked on.
// The device's interrupt delay makes blocking cost at least 200 µs
// whatever the machine: with the bare OS wake-up (10-80 µs, by load) the
// cost model may rightly block for a 30 µs kernel.
func TestHybridSpinsShortKernels(t *testing.T) {
	dev := simdev.New(1)
	dev.InterruptDelay = 200 * time.Microsecond
	s := hybridsync.New(hybridsync.Config{Threshold: signal.Unbounded, Contention: free})
	for range 100 {
		if err := s.Sync(dev.Launch(0, 30*time.Microsecond), 1); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats(nil)
	if st.SpinHits+st.Ready < 80 {
		t.Errorf("spin hits %d + ready %d of 100; blocks %d", st.SpinHits, st.Ready, st.Blocks)
	}
}

// free: the hybrid tests that check what it does on a CPU of its own say
// so, rather than depend on how busy the test machine is.
var free = signal.FixedContention(signal.ContentionFree)

// TestHybridBlocksWhenShared: on a shared CPU hybrid blocks, for short and
// for learned long kernels alike.
func TestHybridBlocksWhenShared(t *testing.T) {
	dev := simdev.New(1)
	s := hybridsync.New(hybridsync.Config{Threshold: signal.Unbounded,
		Contention: signal.FixedContention(signal.ContentionShared)})
	for i := range 60 {
		d, k := 30*time.Microsecond, hybridsync.KernelID(1)
		if i%2 == 1 {
			d, k = 500*time.Microsecond, 2
		}
		if err := s.Sync(dev.Launch(0, d), k); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats(nil)
	if st.SpinHits+st.SleepSpinHits != 0 || st.Blocks+st.Ready != 60 || st.Contention["shared"] != st.Blocks {
		t.Errorf("spin hits %d, sleep-spin hits %d, blocks %d, ready %d, contention %v; want only blocks",
			st.SpinHits, st.SleepSpinHits, st.Blocks, st.Ready, st.Contention)
	}
}

// TestHybridBlocksWhenSliceTooShort: with no slice left to spin in, hybrid
// blocks rather than spin into a preemption.
func TestHybridBlocksWhenSliceTooShort(t *testing.T) {
	dev := simdev.New(1)
	s := hybridsync.New(hybridsync.Config{Threshold: signal.Static(0)})
	for range 50 {
		if err := s.Sync(dev.Launch(0, 30*time.Microsecond), 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(nil); st.SpinHits != 0 || st.Blocks+st.Ready != 50 {
		t.Errorf("spin hits %d, blocks %d, ready %d; want only blocks", st.SpinHits, st.Blocks, st.Ready)
	}
}

// TestPaperFollowsAlgorithm1: the paper's rule polls when the kernel's
// average is under max_threshold and blocks at once when it is over.
func TestPaperFollowsAlgorithm1(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threshold signal.Static
		wantSpin  bool
	}{{"under threshold", 10_000_000, true}, {"over threshold", 100_000, false}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := simdev.New(1)
			s := hybridsync.New(hybridsync.Config{Mode: hybridsync.ModePaper, Threshold: tc.threshold})
			for range 50 {
				if err := s.Sync(dev.Launch(0, 300*time.Microsecond), 1); err != nil {
					t.Fatal(err)
				}
			}
			st := s.Stats(nil)
			if got := st.SpinHits > st.Blocks; got != tc.wantSpin {
				t.Errorf("spin hits %d, blocks %d; want spinning=%v", st.SpinHits, st.Blocks, tc.wantSpin)
			}
		})
	}
}

// TestUnknownKernelIsCounted: waits on kernels of no known name are
// counted apart, an already complete one as ready. The first kernel is
// still running at its wait unless the thread loses its CPU for its whole
// 20 ms between the launch and the wait (100 µs was not enough beside two
// busy loops): a second ready wait then skips, naming the thread's run
// delay.
func TestUnknownKernelIsCounted(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w := disturbance.Start(unix.Gettid())
	dev := simdev.New(1)
	s := hybridsync.New(hybridsync.Config{})
	if err := s.Sync(dev.Launch(0, 20*time.Millisecond), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(dev.Launch(0, 0), 0); err != nil { // already complete
		t.Fatal(err)
	}
	st := s.Stats(nil)
	if st.UnknownKernels.Calls != 2 || st.Calls != 2 || len(st.Kernels) != 0 {
		t.Errorf("unknown calls %d, total %d, kernels %d; want 2, 2, 0", st.UnknownKernels.Calls, st.Calls, len(st.Kernels))
	}
	if st.UnknownKernels.Ready != 1 {
		w.Stop().Check(t, 0.05, fmt.Sprintf("%d unknown waits found their kernel complete, want 1", st.UnknownKernels.Ready))
	}
}

func TestGuestEstimator(t *testing.T) {
	var g signal.GuestEstimator
	const tid = 42
	if r := g.Remaining(tid, 1); r != clock.Infinite {
		t.Fatalf("no gaps yet: remaining %d, want clock.Infinite", r)
	}
	// Runs of 4 ms between 4 ms gaps, as two threads sharing a CPU get.
	const ms = 1_000_000
	base := int64(1000 * ms)
	g.Resumed(tid, base)
	for i := range int64(10) {
		start := base + 8*ms*i + 4*ms
		g.Gap(tid, start, start+4*ms)
	}
	if s := g.Slice(); s < 3*ms || s > 5*ms {
		t.Fatalf("slice %d ns, want about 4 ms", s)
	}
	runStart := base + 8*ms*9 + 8*ms
	if r := g.Remaining(tid, runStart+1*ms); r < 2*ms || r > 4*ms {
		t.Errorf("1 ms into a run: remaining %d ns, want about 3 ms", r)
	}
	if r := g.Remaining(tid, runStart+6*ms); r != 0 {
		t.Errorf("overdue: remaining %d, want 0", r)
	}
	if r := g.Remaining(tid, runStart+10_000*ms); r != clock.Infinite {
		t.Errorf("no gap for 10 s: remaining %d, want clock.Infinite", r)
	}
}

// TestGuestEstimatorKeepsThreadsApart: another thread waking up often must
// neither shorten this thread's learned runs nor its remaining slice.
func TestGuestEstimatorKeepsThreadsApart(t *testing.T) {
	var g signal.GuestEstimator
	const ms = 1_000_000
	base := int64(1000 * ms)
	g.Resumed(1, base)
	for i := range int64(10) {
		start := base + 8*ms*i + 4*ms
		// Thread 2 wakes every 100 µs of thread 1's runs.
		for w := int64(0); w < 40; w++ {
			g.Resumed(2, start-4*ms+w*100_000)
		}
		g.Gap(1, start, start+4*ms)
	}
	if s := g.Slice(); s < 3*ms || s > 5*ms {
		t.Fatalf("slice %d ns, want about 4 ms despite thread 2's wake-ups", s)
	}
	if r := g.Remaining(2, base+80*ms); r != clock.Infinite {
		t.Errorf("thread 2 never saw a gap: remaining %d, want clock.Infinite", r)
	}
}

// TestGuestEstimatorIgnoresOneGap: a single clock gap (an interrupt, a page
// fault) is not contention and must not stop the thread from spinning.
func TestGuestEstimatorIgnoresOneGap(t *testing.T) {
	var g signal.GuestEstimator
	const us = 1_000
	g.Resumed(7, 1000*us)
	g.Gap(7, 1020*us, 1900*us) // a 20 µs "run", then 880 µs away
	if r := g.Remaining(7, 1901*us); r != clock.Infinite {
		t.Errorf("after one gap: remaining %d, want clock.Infinite", r)
	}
}

// TestGuestEstimatorIgnoresInterruptions: short gaps, however many (an
// interrupt, a driver's helper thread waking on the same CPU), are not
// another task's slice: they neither end the run nor bound the spin.
func TestGuestEstimatorIgnoresInterruptions(t *testing.T) {
	var g signal.GuestEstimator
	const us = 1_000
	g.Resumed(7, 1000*us)
	for i := int64(0); i < 20; i++ {
		start := 1020*us + i*200*us
		g.Gap(7, start, start+100*us)
	}
	if r := g.Remaining(7, 5000*us); r != clock.Infinite || g.Gaps() != 0 || g.Slice() != 0 {
		t.Errorf("after 20 gaps of 100 µs: remaining %d, gaps %d, slice %d; want clock.Infinite, 0, 0", r, g.Gaps(), g.Slice())
	}
}

func TestGuestEstimatorManyThreads(t *testing.T) {
	var g signal.GuestEstimator
	for tid := 1; tid <= 1000; tid++ { // more than the table holds
		g.Resumed(tid, 1)
		g.Gap(tid, 2, 2+1_000_000)
	}
	if g.Gaps() != 1000 {
		t.Errorf("gaps %d, want 1000", g.Gaps())
	}
}

func TestNamesAreStable(t *testing.T) {
	var a, b hybridsync.Names
	if a.ID("nonbonded") != b.ID("nonbonded") {
		t.Error("same name, different ids in two registries")
	}
	if a.ID("x") == a.ID("y") || a.ID("x") == 0 {
		t.Error("ids collide or are zero")
	}
	if got := a.Name(a.ID("x")); got != "x" {
		t.Errorf("Name = %q", got)
	}
}

// TestShortWaits: a kernel learned to complete within 150 µs of launch is
// left to the device's own wait (default mode only); a long one is not,
// nor one not yet learned.
func TestShortWaits(t *testing.T) {
	dev := simdev.New(1)
	s := hybridsync.New(hybridsync.Config{Threshold: signal.Unbounded})
	if s.ShortWaits(1) {
		t.Error("an unknown kernel counted as short")
	}
	for range 20 {
		if err := s.Sync(dev.Launch(0, 30*time.Microsecond), 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(dev.Launch(0, 600*time.Microsecond), 2); err != nil {
			t.Fatal(err)
		}
	}
	if !s.ShortWaits(1) || s.ShortWaits(2) {
		t.Errorf("short(30 µs kernel) = %v, short(600 µs kernel) = %v; want true, false", s.ShortWaits(1), s.ShortWaits(2))
	}
	spin := hybridsync.New(hybridsync.Config{Mode: hybridsync.ModeSpin, Dict: s.Dict()})
	if spin.ShortWaits(1) {
		t.Error("spin mode delegates")
	}
}

// stalling is untimed, with the first query from stallAt on (ns from
// launch) stalling the thread for stall first, as a descheduled spin does.
type stalling struct {
	untimed
	stallAt int64
	stall   time.Duration
}

func (u *stalling) Query() (bool, error) {
	if u.stallAt > 0 && clock.Now()-u.LaunchedAt() >= u.stallAt {
		u.stallAt = 0
		time.Sleep(u.stall)
	}
	return u.untimed.Query()
}

// TestLongSpinWithGapEndsShortWaits: a kernel learned short that grows
// long, whose first long wait spins and loses its CPU before the work
// completes, is short no more: the spin still saw the work running far
// beyond the learned mean. (The wait only bounds the completion from
// above; taking just that, the policy judged the kernel short again and
// the C library left its next wait to CUDA.)
func TestLongSpinWithGapEndsShortWaits(t *testing.T) {
	dev := simdev.New(1)
	// A long spin cap: the wait spins through to its stall. Kernel and
	// stall are long so that a machine busy with other work, which may
	// also take the CPU away, leaves a query at 1 ms or later before it.
	s := hybridsync.New(hybridsync.Config{Threshold: signal.Unbounded, Contention: free, MaxSpin: 100_000_000})
	for range 20 {
		s.Dict().Update(1, 30_000)
	}
	if tm, _ := s.Dict().Lookup(1); !s.ShortWaits(1) {
		t.Fatalf("a 30 µs kernel is not short: timing %+v", tm)
	}
	ev := &stalling{untimed: untimed{dev.Launch(0, 20*time.Millisecond)}, stallAt: int64(10 * time.Millisecond), stall: 15 * time.Millisecond}
	if err := s.Sync(ev, 1); err != nil {
		t.Fatal(err)
	}
	if tm, _ := s.Dict().Lookup(1); s.ShortWaits(1) {
		t.Errorf("after a wait that saw a 20 ms kernel still running at 10 ms: timing %+v, still short", tm)
	}
}
