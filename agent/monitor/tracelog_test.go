package monitor

import (
	"testing"
	"time"
)

func TestTraceLog(t *testing.T) {
	var l traceLog
	l.start(100)
	l.start(150) // already on: no new window
	l.stop(200)
	l.stop(250) // already off
	l.start(300)
	l.stop(400)
	l.start(500)
	for _, tc := range []struct {
		from, now uint64
		want      time.Duration
	}{
		{0, 600, 300},   // 100 + 100 + the open 100
		{150, 600, 250}, // half of the first window
		{450, 600, 100}, // only the open one
		{600, 600, 0},
	} {
		if got := l.since(tc.from, tc.now); got != tc.want {
			t.Errorf("since(%d, %d) = %v, want %v", tc.from, tc.now, got, tc.want)
		}
	}
	if got := l.total(600); got != 300 {
		t.Errorf("total = %v, want 300", got)
	}
	l.trim(250) // the first window ended before 250
	if len(l.spans) != 1 || l.total(600) != 300 {
		t.Errorf("after trim: spans %v, total %v; want one span, total kept", l.spans, l.total(600))
	}
}
