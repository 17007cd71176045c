package hybridsync

import (
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// Config configures a Syncer. The zero value is the default: hybrid policy,
// a fresh dictionary, the guest-only slice estimator, a 10 ms spin cap.
type Config struct {
	Mode Mode
	// MaxSpin caps any single spin, in ns; the paper's max_threshold when
	// the threshold source has nothing better. 0 means DefaultMaxSpin.
	MaxSpin int64
	// Threshold gives the remaining time slice; nil means a GuestEstimator.
	Threshold signal.ThresholdSource
	// Dict is the timing dictionary; nil means a new one of
	// DefaultDictSize. Share one between Syncers to share what they learn.
	Dict *Dict
	// Contention tells whether a waiting thread competes for its CPU;
	// nil means a SchedSignal (the kernel's own accounting).
	Contention signal.ContentionSource
}

// DefaultMaxSpin is the paper's max_threshold: 10 ms, a typical hypervisor
// time slice.
const DefaultMaxSpin = 10_000_000

// gapNs: a spin iteration takes tens of ns; an interrupt a few µs. A clock
// jump of more than this between two iterations means the thread was
// descheduled.
const gapNs = 50_000

// Syncer waits for device events with one policy. It is safe for use by many
// threads at once; what it learns (kernel timings, wake-up costs, the time
// slice) is shared by all of them.
type Syncer struct {
	mode    Mode
	policy  policy
	dict    *Dict
	thr     signal.ThresholdSource
	gaps    signal.GapObserver // thr, when it learns from spin loops
	cont    signal.ContentionSource
	maxSpin int64

	sleepLate lateness // how late timed sleeps wake after their deadline
	blockLate lateness // how late a blocking wait returns after completion
	unknown   kernelCounters
	byState   [4]atomic.Uint64 // waits that had to wait, by signal.Contention
}

// New returns a Syncer for cfg.
func New(cfg Config) *Syncer {
	s := &Syncer{mode: cfg.Mode, dict: cfg.Dict, thr: cfg.Threshold, maxSpin: cfg.MaxSpin}
	if s.dict == nil {
		s.dict = NewDict(DefaultDictSize)
	}
	if s.thr == nil {
		s.thr = &signal.GuestEstimator{}
	}
	s.gaps, _ = s.thr.(signal.GapObserver)
	if s.cont = cfg.Contention; s.cont == nil {
		s.cont = &signal.SchedSignal{}
	}
	if s.maxSpin <= 0 {
		s.maxSpin = DefaultMaxSpin
	}
	s.policy = policies[cfg.Mode]
	if s.policy == nil {
		s.policy = policies[ModeHybrid]
		s.mode = ModeHybrid
	}
	return s
}

// Contention is the source of the contention verdicts.
func (s *Syncer) Contention() signal.ContentionSource { return s.cont }

// Mode returns the policy in use.
func (s *Syncer) Mode() Mode { return s.mode }

// Dict returns the timing dictionary.
func (s *Syncer) Dict() *Dict { return s.dict }

// Sync returns once ev has completed, with the error the device's blocking
// wait returns for it. k identifies the kernel the event follows (0 if not
// known); its timing is learned and used to choose how to wait.
func (s *Syncer) Sync(ev Event, k KernelID) error {
	if done, err := ev.Query(); done {
		s.ready(ev, k)
		return err
	}
	return s.SyncPending(ev, k)
}

// SyncPending is Sync for work its caller has just found unfinished (its
// own query said not ready): the wait, without querying again.
// libhybridsync's C side queries before it crosses into Go, where a wait
// on finished work would cost more than the query.
func (s *Syncer) SyncPending(ev Event, k KernelID) error {
	c := call{s: s, ev: ev, k: k, e: s.dict.find(k, true), launch: ev.LaunchedAt(), notBefore: clock.Now(), tid: unix.Gettid()}
	err := s.policy.wait(&c)
	c.learn()
	c.count()
	return err
}

// ready handles an event already complete when Sync was called: the cheap
// path, which must stay within tens of ns of a bare Query.
func (s *Syncer) ready(ev Event, k KernelID) {
	e := s.dict.find(k, false)
	if e == nil {
		s.unknown.calls.Add(1)
		s.unknown.ready.Add(1)
		return
	}
	e.stats.calls.Add(1)
	e.stats.ready.Add(1)
	launch := ev.LaunchedAt()
	if launch == 0 {
		return
	}
	if ct, ok := ev.(CompletionTimer); ok {
		if t, ok := ct.CompletedAt(); ok {
			e.update(t - launch)
			return
		}
	}
	e.bound(clock.Now() - launch)
}

// How a call ended, for the stats.
const (
	endBlock = iota
	endSpin
	endSleepSpin
)

// call is the state of one Sync that had to wait.
type call struct {
	s      *Syncer
	ev     Event
	k      KernelID
	e      *entry // nil for unknown kernels or a full dictionary
	launch int64
	tid    int // the calling OS thread: slice estimates are per thread

	end       int   // endBlock, endSpin or endSleepSpin
	notBefore int64 // the last time a Query said "not done"
	seen      int64 // when completion was noticed
	spun      int64 // ns spent spinning
	blocked   int64 // ns spent in the blocking wait
	slept     int64 // ns spent in timed sleeps
	err       error
}

// timing returns the kernel's learned timing; ok is false when there is
// nothing to predict from.
func (c *call) timing() (Timing, bool) {
	if c.e == nil || c.launch == 0 {
		return Timing{}, false
	}
	t := unpack(c.e.timing.Load())
	return t, t.N > 0
}

// spinCap is how long this thread may spin from now: the remaining time
// slice, capped by MaxSpin.
func (c *call) spinCap(now int64) int64 {
	return min(c.s.thr.Remaining(c.tid, now), c.s.maxSpin)
}

// spin polls until completion or until deadline; it reports completion.
// It watches the clock for gaps, which feed the slice estimator.
func (c *call) spin(deadline int64) bool {
	start := clock.Now()
	last := start
	for {
		done, err := c.ev.Query()
		now := clock.Now()
		if now-last > gapNs {
			c.gap(last, now)
		}
		if done {
			c.spun += now - start
			c.seen, c.err = now, err
			return true
		}
		c.notBefore = now
		if now >= deadline {
			c.spun += now - start
			return false
		}
		last = now
	}
}

// gap reports that the thread did not run from start to end while it
// spun: to the slice estimator, and, when it is long enough to be another
// task's turn, to the contention signal, which then samples at once.
func (c *call) gap(start, end int64) {
	if c.s.gaps != nil {
		c.s.gaps.Gap(c.tid, start, end)
	}
	if d, ok := c.s.cont.(interface{ Descheduled(int) }); ok && end-start >= signal.MinDescheduleNs {
		d.Descheduled(c.tid)
	}
}

// contention asks the contention source about the calling thread and
// counts the answer for the stats.
func (c *call) contention(now int64) signal.Contention {
	st := c.s.cont.Contention(c.tid, now)
	if st < 0 || int(st) >= len(c.s.byState) {
		st = signal.ContentionUnknown
	}
	c.s.byState[st].Add(1)
	return st
}

// block waits in the device's blocking wait.
func (c *call) block() error {
	start := clock.Now()
	c.err = c.ev.Wait()
	now := clock.Now()
	c.blocked += now - start
	c.seen, c.end = now, endBlock
	if c.s.gaps != nil {
		c.s.gaps.Resumed(c.tid, now)
	}
	return c.err
}

// spinThenBlock spins until deadline and blocks if the work is not done by
// then: 2-competitive against the best of the two in hindsight when the
// deadline is the blocking cost.
func (c *call) spinThenBlock(deadline int64, end int) error {
	if c.spin(deadline) {
		c.end = end
		return c.err
	}
	return c.block()
}

// sleepUntil sleeps the thread until the monotonic time t, with a timer (not
// the Go scheduler, whose timers may be a millisecond late on an idle
// process), and records how late it woke.
func (c *call) sleepUntil(t int64) {
	start := clock.Now()
	sleepPrecise(t)
	now := clock.Now()
	c.slept += now - start
	c.s.sleepLate.observe(now - t)
	if c.s.gaps != nil {
		c.s.gaps.Resumed(c.tid, now)
	}
}

// sleepPrecise sleeps the calling OS thread until the monotonic time t.
// Linux lets a timer fire up to the thread's timer slack late (50 µs by
// default) to batch wake-ups; every µs of that is a µs the thread must spin
// early to be sure to be back before the kernel completes. The slack is set
// to its minimum for this sleep only and restored after, so the host
// program's own sleeps keep theirs.
func sleepPrecise(t int64) {
	// The slack belongs to the OS thread: keep the goroutine on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err == nil && old > 1 {
		unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
	}
	ts := unix.NsecToTimespec(t)
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}

// learn folds what this call observed into the dictionary and the wake-up
// cost estimates. The completion happened in (notBefore, seen]; how well
// that interval pins it down decides whether it is a sample or only an
// upper bound.
func (c *call) learn() {
	if ct, ok := c.ev.(CompletionTimer); ok {
		if done, ok := ct.CompletedAt(); ok {
			if c.end == endBlock {
				c.s.blockLate.observe(c.seen - done)
			}
			c.sample(done)
			return
		}
	}
	switch {
	case c.seen-c.notBefore <= gapNs:
		// A spin saw it go from not done to done.
		c.sample(c.seen)
	case c.end == endBlock:
		// The blocking wait returned some wake-up cost after completion,
		// and the work was still running at notBefore.
		c.sample(max(c.notBefore, c.seen-c.s.blockLate.mean.Load()))
	case c.e == nil || c.launch == 0:
		// Nothing to learn into, or nothing to count from.
	case c.slept > 0:
		// Done at the first query after a sleep: it may have completed any
		// time during the sleep.
		c.e.overslept(c.seen - c.launch)
	default:
		// A spin that lost its CPU for a while: done some time during the
		// gap, after notBefore, when the work was still running. That
		// lower bound, where it is past the mean, shows the mean too low
		// and is folded in (atLeast); else only the upper bound can say
		// something (bound). Taking the upper bound alone, a kernel
		// learned short that had grown long stayed short after such a
		// wait, and the C library left its next wait to the device again
		// (libhybridsync/ctest: TestPreloadLongAgainLeavesCUDA).
		if !c.e.atLeast(c.notBefore - c.launch) {
			c.e.bound(c.seen - c.launch)
		}
	}
}

func (c *call) sample(done int64) {
	if c.e != nil && c.launch != 0 {
		c.e.update(done - c.launch)
	}
}

func (c *call) count() {
	st := &c.s.unknown
	if c.e != nil {
		st = &c.e.stats
	}
	st.add(c)
}
