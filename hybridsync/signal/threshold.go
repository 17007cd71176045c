package signal

import (
	"sync/atomic"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/perthread"
)

// ThresholdSource tells how much of a thread's CPU time slice is left: how
// long it may spin before the scheduler (the host's, for a vCPU) is
// expected to take the CPU away. Spinning past that point wastes the slice
// and makes the thread notice completion a whole off-CPU period late.
type ThresholdSource interface {
	// Remaining returns the expected remaining slice (ns) at now of the
	// thread tid, or clock.Infinite when nothing is expected to preempt it.
	Remaining(tid int, now int64) int64
}

// Static is a fixed remaining slice in ns: the paper's max_threshold.
type Static int64

// Remaining returns the fixed value.
func (s Static) Remaining(int, int64) int64 { return int64(s) }

// Unbounded never expects preemption.
var Unbounded ThresholdSource = Static(clock.Infinite)

// GapObserver is implemented by sources that learn from the spin loops of
// Sync: a clock jump between two iterations means the thread was descheduled.
type GapObserver interface {
	// Gap reports that thread tid did not run from start to end.
	Gap(tid int, start, end int64)
	// Resumed reports that thread tid woke from a voluntary sleep at now,
	// which starts a fresh run on the CPU.
	Resumed(tid int, now int64)
}

// GuestEstimator estimates the remaining slice from inside the VM (or
// process) alone, with no host agent, the way a thread in a public cloud
// must: while spinning a thread watches its own clock, and a gap much
// longer than a loop iteration means it was descheduled. The lengths of the
// runs between gaps give the typical slice; a thread's remaining slice is
// that minus the time since its current run began.
//
// The typical slice is shared by all threads (it is a property of the
// scheduler above them), but where each run began is per thread: with one
// shared start, thread A's wake-up would cut thread B's run short in the
// estimate, and with a few threads the learned slice collapses toward zero.
// Threads are kept in a fixed table; past its size, threads share one
// overflow slot and the estimate degrades instead of memory growing.
//
// The zero value is ready to use.
type GuestEstimator struct {
	slice atomic.Int64 // EWMA of run lengths (ns), 0 until the first gap
	gaps  atomic.Uint64

	threads perthread.Slots[threadRun]
}

// threadRun is one thread's current run, written only by that thread (or,
// in the overflow slot, racily by several, which only blurs the estimate).
type threadRun struct {
	runStart atomic.Int64 // start of the current run (ns)
	lastGap  atomic.Int64 // end of the most recent gap (ns)
	recent   atomic.Int64 // gaps since the thread last went staleAfter without one
}

// minGaps is how many deschedulings a thread must see, each within
// staleAfter of the last, before its estimate is used. One gap may be an
// interrupt storm or a page fault, and a single short "run" before it is
// no slice (docs/tried.md: "Every clock gap as a descheduling").
const minGaps = 3

// MinDescheduleNs: a gap shorter than this is an interruption, not the
// end of a slice: an interrupt, a kworker, or the GPU driver's own helper
// thread (pinned with the process, it wakes on the waiter's CPU whenever
// a blocking-sync event completes). The thread gets its CPU back within
// about a wake-up's cost, so spinning through one costs no more than
// blocking; what the estimate guards against is losing the CPU for
// another task's slice (0.75 ms and up under Linux, milliseconds under a
// hypervisor or a bandwidth quota). Counted, such gaps would make the
// estimate a "slice" of tens of µs with no co-runner at all
// (docs/tried.md: "Every clock gap as a descheduling").
const MinDescheduleNs = 250_000

// staleAfter: with no descheduling seen for this long, contention is
// assumed gone and the slice unbounded again. Long enough to span several
// throttling periods of cgroup bandwidth control (100 ms by default).
const staleAfter = 500_000_000

func (g *GuestEstimator) thread(tid int) *threadRun { return g.threads.Get(tid) }

// Gap records that thread tid was off the CPU from start to end. Gaps
// shorter than MinDescheduleNs are part of the run.
func (g *GuestEstimator) Gap(tid int, start, end int64) {
	if end-start < MinDescheduleNs {
		return
	}
	t := g.thread(tid)
	if last := t.lastGap.Load(); last == 0 || start-last > staleAfter {
		t.recent.Store(1)
	} else {
		t.recent.Add(1)
	}
	if rs := t.runStart.Load(); rs > 0 && start > rs {
		run := start - rs
		if old := g.slice.Load(); old == 0 {
			g.slice.Store(run)
		} else {
			g.slice.Store(old + (run-old)/8)
		}
	}
	t.runStart.Store(end)
	t.lastGap.Store(end)
	g.gaps.Add(1)
}

// Resumed records that thread tid's voluntary sleep ended at now.
func (g *GuestEstimator) Resumed(tid int, now int64) { g.thread(tid).runStart.Store(now) }

// Remaining returns the typical slice minus the time thread tid has run so
// far, 0 when the slice is overdue, and clock.Infinite until the thread has seen
// minGaps deschedulings in a row or once it has not seen one for a while.
func (g *GuestEstimator) Remaining(tid int, now int64) int64 {
	slice := g.slice.Load()
	t := g.thread(tid)
	if slice == 0 || t.recent.Load() < minGaps || now-t.lastGap.Load() > staleAfter {
		return clock.Infinite
	}
	return max(slice-(now-t.runStart.Load()), 0)
}

// Slice returns the learned typical run length in ns, 0 if none yet.
func (g *GuestEstimator) Slice() int64 { return g.slice.Load() }

// Gaps returns how many deschedulings the estimator has seen.
func (g *GuestEstimator) Gaps() uint64 { return g.gaps.Load() }
