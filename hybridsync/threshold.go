package hybridsync

import "sync/atomic"

// ThresholdSource tells how much of the calling thread's CPU time slice is
// left: how long it may spin before the scheduler (the host's, for a vCPU)
// is expected to take the CPU away. Spinning past that point wastes the
// slice and makes the thread notice completion a whole off-CPU period late.
type ThresholdSource interface {
	// Remaining returns the expected remaining slice at now (ns), or
	// Infinite when nothing is expected to preempt the thread.
	Remaining(now int64) int64
}

// Static is a fixed remaining slice in ns: the paper's max_threshold.
type Static int64

// Remaining returns the fixed value.
func (s Static) Remaining(int64) int64 { return int64(s) }

// Unbounded never expects preemption.
var Unbounded ThresholdSource = Static(Infinite)

// gapObserver is implemented by sources that learn from the spin loops of
// Sync: a clock jump between two iterations means the thread was descheduled.
type gapObserver interface {
	// Gap reports that the thread did not run from start to end.
	Gap(start, end int64)
	// Resumed reports that the thread woke from a voluntary sleep at now,
	// which starts a fresh run on the CPU.
	Resumed(now int64)
}

// GuestEstimator estimates the remaining slice from inside the VM (or
// process) alone, with no host agent, the way a thread in a public cloud
// must: while spinning it watches its own clock, and a gap much longer than
// a loop iteration means it was descheduled. The lengths of the runs between
// gaps give the typical slice; the remaining slice is that minus the time
// since the current run began.
//
// It is shared by all threads of a Syncer, so with several host threads it
// mixes their runs; the estimate stays usable because threads of one VM see
// the same host scheduler.
type GuestEstimator struct {
	// All fields are atomics written by whichever thread observes a gap
	// or a wake-up; lost updates between racing threads only drop samples.
	runStart atomic.Int64 // start of the current run (ns)
	slice    atomic.Int64 // EWMA of run lengths, 0 until the first gap
	lastGap  atomic.Int64 // end of the most recent gap
	gaps     atomic.Uint64
}

// staleAfter: with no descheduling seen for this long, contention is
// assumed gone and the slice unbounded again. Long enough to span several
// throttling periods of cgroup bandwidth control (100 ms by default).
const staleAfter = 500_000_000

// Gap records that the thread was off the CPU from start to end.
func (g *GuestEstimator) Gap(start, end int64) {
	if rs := g.runStart.Load(); rs > 0 && start > rs {
		run := start - rs
		old := g.slice.Load()
		if old == 0 {
			g.slice.Store(run)
		} else {
			g.slice.Store(old + (run-old)/8)
		}
	}
	g.runStart.Store(end)
	g.lastGap.Store(end)
	g.gaps.Add(1)
}

// Resumed records that a voluntary sleep ended at now.
func (g *GuestEstimator) Resumed(now int64) { g.runStart.Store(now) }

// Remaining returns the typical slice minus the time run so far, 0 when the
// slice is overdue, and Infinite before any descheduling was seen or once
// it has not been seen for a while.
func (g *GuestEstimator) Remaining(now int64) int64 {
	slice := g.slice.Load()
	if slice == 0 || now-g.lastGap.Load() > staleAfter {
		return Infinite
	}
	return max(slice-(now-g.runStart.Load()), 0)
}

// Slice returns the learned typical run length in ns, 0 if none yet.
func (g *GuestEstimator) Slice() int64 { return g.slice.Load() }

// Gaps returns how many deschedulings the estimator has seen.
func (g *GuestEstimator) Gaps() uint64 { return g.gaps.Load() }
