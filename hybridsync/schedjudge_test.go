package hybridsync

import "testing"

// quotaWindows returns a thread's 4 ms sampling windows over periods of a
// 10 ms per 20 ms quota: it runs 10 ms, then waits out a throttle whose
// time cpu.stat counts only in the window after it ends; extra is the run
// delay a competitor adds to every window.
func quotaWindows(periods int, extra int64) []schedWindow {
	const win = 4_000_000
	var ws []schedWindow
	for p := 0; p < periods; p++ {
		for i := range 5 {
			w := schedWindow{dt: win, delay: extra, runs: 1}
			switch i {
			case 0:
				if p > 0 {
					w.throttled = 10_000_000 // the last period's throttle, now counted
				}
			case 2:
				w.delay += 2_000_000 // runs 2 ms, then throttled
			case 3, 4:
				w.delay, w.runs = win, 0
			}
			ws = append(ws, w)
		}
	}
	return ws
}

// TestJudgeLateThrottle: under a quota, the windows a throttle spans show
// run delay before cpu.stat counts the throttle; judged together with the
// window that counts it, a thread alone is throttled and never shared,
// while one beside a competitor under the same quota is shared. Without a
// quota each window is judged at once.
func TestJudgeLateThrottle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extra    int64
		period   int64
		wantSeen bool
	}{
		{"alone under a quota", 0, 20_000_000, false},
		{"beside a competitor under a quota", 1_000_000, 20_000_000, true},
	} {
		var th threadSched
		now, shared, throttled := int64(1e9), 0, 0
		for _, w := range quotaWindows(6, tc.extra) {
			now += w.dt
			judge(&th, now, w, tc.period)
			if now < th.sharedTo.Load() {
				shared++
			}
			if now < th.throttleTo.Load() {
				throttled++
			}
		}
		if (shared > 0) != tc.wantSeen || throttled == 0 {
			t.Errorf("%s: %d of 30 windows shared, %d throttled; want shared %v, some throttled", tc.name, shared, throttled, tc.wantSeen)
		}
	}
	// No quota: one window with delay nothing explains is shared at once.
	var th threadSched
	judge(&th, 1e9, schedWindow{dt: 4_000_000, delay: 3_000_000, runs: 1}, 0)
	if th.sharedTo.Load() <= 1e9 {
		t.Error("no quota: a window waiting 3 ms of 4 was not judged shared")
	}
}
