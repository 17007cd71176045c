package signal

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

// TestJudgeHoldsWhileAsleep: a thread that blocks beside a busy co-runner
// is woken promptly, so its windows after the first show little run
// delay; while it mostly sleeps and its CPU is never idle, they hold the
// shared verdict. A window in which it was runnable most of the time, or
// in which its CPU was idle, releases it once SharedHold has passed. A
// thread alone never reads shared, whether it sleeps or spins.
func TestJudgeHoldsWhileAsleep(t *testing.T) {
	const win = 4_000_000
	contended := schedWindow{dt: win, cpu: 500_000, delay: 2_000_000, runs: 4, idle: 0}
	asleepBusy := schedWindow{dt: win, cpu: 800_000, delay: 200_000, runs: 5, idle: 0}   // woken promptly, 40 µs a run
	asleepIdle := schedWindow{dt: win, cpu: 800_000, delay: 20_000, runs: 5, idle: 0.7}  // alone: its CPU idles while it sleeps
	awake := schedWindow{dt: win, cpu: 3_900_000, delay: 50_000, runs: 1, idle: 0}       // spinning, and it got the CPU
	unknown := schedWindow{dt: win, cpu: -1, delay: 200_000, runs: 5, idle: 0}           // the thread's CPU time not read
	unknownIdle := schedWindow{dt: win, cpu: 800_000, delay: 200_000, runs: 5, idle: -1} // /proc/stat not read
	for _, tc := range []struct {
		name   string
		after  schedWindow
		shared bool // still shared a second after the contended window
	}{
		{"asleep, CPU busy", asleepBusy, true},
		{"asleep, CPU idle", asleepIdle, false},
		{"runnable", awake, false},
		{"CPU time not known", unknown, false},
		{"idle not known", unknownIdle, false},
	} {
		var th threadSched
		now := int64(1e9)
		judge(&th, now, contended, 0)
		if now >= th.sharedTo.Load() {
			t.Fatalf("%s: the contended window was not judged shared", tc.name)
		}
		for range 250 {
			now += win
			judge(&th, now, tc.after, 0)
		}
		if got := now < th.sharedTo.Load(); got != tc.shared {
			t.Errorf("%s: shared %v a second later, want %v", tc.name, got, tc.shared)
		}
	}
	// Alone, from the start: no window is shared, and none holds.
	for _, w := range []schedWindow{asleepIdle, awake} {
		var th threadSched
		now := int64(1e9)
		for range 100 {
			now += win
			judge(&th, now, w, 0)
			if now < th.sharedTo.Load() {
				t.Fatalf("alone (%+v): judged shared", w)
			}
		}
	}
	// Under a quota the windows judged together hold it alike.
	var th threadSched
	now := int64(1e9)
	judge(&th, now, contended, 20_000_000)
	for range 20 {
		now += win
		judge(&th, now, contended, 20_000_000)
	}
	for range 250 {
		now += win
		judge(&th, now, asleepBusy, 20_000_000)
	}
	if now >= th.sharedTo.Load() {
		t.Error("under a quota: a sleeping thread's windows on a busy CPU released the verdict")
	}
}

// TestWindowAdd: CPU time adds up unless either window lacks it.
func TestWindowAdd(t *testing.T) {
	a := schedWindow{dt: 1, cpu: 2, delay: 3, runs: 4, idle: 0.5}
	if s := a.add(a); s.cpu != 4 || s.dt != 2 || s.idle != 0.5 {
		t.Errorf("sum %+v", s)
	}
	b := a
	b.cpu = -1
	if s := a.add(b); s.cpu != -1 {
		t.Errorf("sum with an unknown CPU time: %+v", s)
	}
}

// TestWaitedCountsSteal: a thread's waits for its CPU add up its run
// delay and its CPU's steal over each judged window (inside a guest the
// host's other vCPUs show only as steal), under a quota too.
func TestWaitedCountsSteal(t *testing.T) {
	var g SchedSignal
	th := g.thread(5)
	judge(th, 1e9, schedWindow{dt: 100e6, cpu: -1, delay: 10e6, runs: 2, idle: -1}, 0)
	judge(th, 2e9, schedWindow{dt: 100e6, cpu: -1, delay: 0, runs: 2, steal: 0.25, idle: -1}, 0)
	judge(th, 3e9, schedWindow{dt: 50e6, cpu: -1, delay: 5e6, runs: 1, idle: -1}, 100e6)
	if waited, span := g.Waited(5); waited != 40e6 || span != 250e6 {
		t.Errorf("Waited: %d of %d ns, want 40 ms (10 + 25 steal + 5) of 250 ms", waited, span)
	}
	if waited, span := g.Waited(6); waited != 0 || span != 0 {
		t.Errorf("a thread never judged: %d of %d, want 0 of 0", waited, span)
	}
}
