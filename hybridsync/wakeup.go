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
}

func (l *lateness) observe(late int64) {
	late = max(late, 0)
	n := l.n.Add(1)
	if n == 1 {
		l.mean.Store(late)
		return
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

// high returns a pessimistic lateness (mean + 2 deviations), or def with no
// samples yet.
func (l *lateness) high(def int64) int64 {
	if l.n.Load() == 0 {
		return def
	}
	return l.mean.Load() + 2*l.dev.Load()
}

func (l *lateness) snapshot() (mean, dev int64, n int64) {
	return l.mean.Load(), l.dev.Load(), l.n.Load()
}
