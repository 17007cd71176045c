package hybridsync

import "sync/atomic"

// lateness tracks how late a blocked thread resumes after the moment it
// should have: after a timer's deadline, or after the device completed.
// This cost differs by two orders of magnitude between a bare process (tens
// of µs) and a vCPU that must be woken by the hypervisor (ms), so it is
// measured, never assumed.
//
// Updates from racing threads are load-then-store: one may be lost, which
// only drops a sample.
type lateness struct {
	mean atomic.Int64 // ns, EWMA
	dev  atomic.Int64 // ns, EWMA of absolute deviation
	n    atomic.Int64
	// typ tracks the 75th percentile: what a wake-up usually costs. The
	// mean is dominated by rare wake-ups that miss the scheduler's
	// wake-up preemption and wait a whole tick (ms); those cost the same
	// whichever way the thread waits, so decisions use typ, not the mean.
	typ atomic.Int64
}

// typQ is the quantile typ tracks.
const typQ = 0.75

func (l *lateness) observe(late int64) {
	late = max(late, 0)
	n := l.n.Add(1)
	if n == 1 {
		l.mean.Store(late)
		l.typ.Store(late)
		return
	}
	// Stochastic quantile tracking: step up by typQ, down by 1-typQ, in
	// steps proportional to the estimate so it converges at any scale.
	q := l.typ.Load()
	step := max(q/16, 100)
	if late > q {
		l.typ.Store(q + int64(float64(step)*typQ))
	} else {
		l.typ.Store(max(q-int64(float64(step)*(1-typQ)), 0))
	}
	w := min(n, window)
	m := l.mean.Load()
	d := late - m
	l.mean.Store(m + d/w)
	if d < 0 {
		d = -d
	}
	dv := l.dev.Load()
	l.dev.Store(dv + (d-dv)/w)
}

// typical returns the usual lateness (75th percentile), or def with no
// samples yet.
func (l *lateness) typical(def int64) int64 {
	if l.n.Load() == 0 {
		return def
	}
	return l.typ.Load()
}

func (l *lateness) snapshot() (mean, dev, typical int64) {
	return l.mean.Load(), l.dev.Load(), l.typ.Load()
}
