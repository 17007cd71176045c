package signal

import "time"

// Contention is what a thread's CPU looks like right now, as far as the
// choice between spinning and blocking is concerned.
type Contention int

const (
	// ContentionUnknown: no signal yet; the policy does what CUDA's
	// better mode would do without one.
	ContentionUnknown Contention = iota
	// ContentionFree: the thread gets its CPU whenever it is runnable.
	// Spinning costs only CPU nobody else wants.
	ContentionFree
	// ContentionThrottled: the thread waits for CPU because of a
	// bandwidth quota (cgroup cpu.max, libvirt <cputune> quota), not
	// because another task competes for it. Spinning spends quota.
	ContentionThrottled
	// ContentionShared: another runnable task competes for the thread's
	// CPU (a co-runner, another VM's vCPU on the same physical CPU).
	// Every spin is CPU taken from the thread's own fair share.
	ContentionShared
)

func (c Contention) String() string {
	switch c {
	case ContentionFree:
		return "free"
	case ContentionThrottled:
		return "throttled"
	case ContentionShared:
		return "shared"
	}
	return "unknown"
}

// ContentionSource tells whether the thread tid is waiting for a CPU
// (from its own scheduler statistics, the VM's steal time, or the host's
// hint page). Implementations are called on every wait that does not find
// the work complete, so they must be cheap: sample the underlying counters
// every few ms, not per call.
type ContentionSource interface {
	Contention(tid int, now int64) Contention
}

// FixedContention always gives the same answer: for tests, and for a
// deployment that knows its CPUs are (or are not) shared.
type FixedContention Contention

// Contention returns the fixed value.
func (f FixedContention) Contention(int, int64) Contention { return Contention(f) }

// RunDelay is the calling thread's scheduler statistics as its caller read
// them for a report (/proc/thread-self/schedstat): the run delay and the
// times it was scheduled in. OK false: none read.
type RunDelay struct {
	Delay, Runs int64
	OK          bool
}

// RunDelayObserver is a contention source that can take a reading its
// caller made instead of making its own (SchedSignal).
type RunDelayObserver interface {
	ObserveRunDelay(tid int, now int64, rd RunDelay)
}

// MitigationSource tells whether the host agent gave a thread a short
// EEVDF slice (HintSource reads it from the hint page).
type MitigationSource interface {
	Mitigation(tid int) (slice time.Duration, ok bool)
}

// TeamSource tells whether other threads of the process spin on other
// contended CPUs while thread tid waits (an OpenMP team at its barrier:
// SchedSignal reads it from the kernel's accounting, teamScan says why it
// matters); known is false where it cannot tell (then no team is assumed).
type TeamSource interface {
	Team(tid int, now int64) (team, known bool)
}
