package monitor

import "time"

// traceLog remembers when the programs were attached, so a snapshot can
// say how much of its window the distributions cover. Times are
// CLOCK_MONOTONIC ns.
type traceLog struct {
	on      bool
	openNs  uint64      // start of the current window, when on
	spans   [][2]uint64 // closed windows, oldest first
	totalNs uint64      // closed windows since the start
}

func (l *traceLog) start(now uint64) {
	if !l.on {
		l.on, l.openNs = true, now
	}
}

func (l *traceLog) stop(now uint64) {
	if l.on {
		l.on = false
		l.spans = append(l.spans, [2]uint64{l.openNs, now})
		l.totalNs += now - l.openNs
	}
}

// trim forgets windows that ended before cut.
func (l *traceLog) trim(cut uint64) {
	i := 0
	for i < len(l.spans) && l.spans[i][1] < cut {
		i++
	}
	l.spans = l.spans[i:]
}

// since returns how long the programs were attached in [from, now].
func (l *traceLog) since(from, now uint64) time.Duration {
	var ns uint64
	add := func(a, b uint64) {
		a = max(a, from)
		if b > a {
			ns += b - a
		}
	}
	for _, s := range l.spans {
		add(s[0], s[1])
	}
	if l.on {
		add(l.openNs, now)
	}
	return time.Duration(ns)
}

// total returns how long the programs were attached since the start.
func (l *traceLog) total(now uint64) time.Duration {
	ns := l.totalNs
	if l.on {
		ns += now - l.openNs
	}
	return time.Duration(ns)
}
