package disturbance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// Two spinning threads pinned to one CPU wait for it about half the
// time each, and more on a busier machine: never under a fifth.
func TestRunDelay(t *testing.T) {
	var stop atomic.Bool
	tids := make(chan int, 2)
	for range 2 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(0)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				t.Error(err)
			}
			tids <- unix.Gettid()
			for !stop.Load() {
			}
		}()
	}
	a, b := <-tids, <-tids
	w := Start(a)
	time.Sleep(300 * time.Millisecond)
	f := w.Stop()
	stop.Store(true)
	t.Logf("a spinning thread sharing CPU 0 with another (tid %d, %d): %v", a, b, f)
	// The kernel adds a wait to run_delay when it ends: one begun before
	// the window counts whole, and may take the figure past 100%.
	if f.RunDelay < 0.2 || f.RunDelay > 3 {
		t.Errorf("a thread sharing its CPU with a busy one waited %.0f%% of the time, want about half", 100*f.RunDelay)
	}
	if len(f.Steal) != runtime.NumCPU() && len(f.Steal) != 0 {
		t.Errorf("steal of %d CPUs, the machine has %d", len(f.Steal), runtime.NumCPU())
	}

	// All the process's threads: at least the spinning pair's wait.
	f = Start().Stop()
	if f.RunDelay < 0 || f.Seconds <= 0 {
		t.Errorf("whole process: %v", f)
	}
}

func TestParseCPUTicks(t *testing.T) {
	before := signal.ParseCPUTicks("cpu  10 0 10 100 0 0 0 5 0 0\ncpu0 5 0 5 50 0 0 0 0 3 0\ncpu1 5 0 5 50 0 0 0 5 0 0\nintr 1 2\n")
	after := signal.ParseCPUTicks("cpu  10 0 10 100 0 0 0 5 0 0\ncpu0 15 0 5 140 0 0 0 0 9 0\ncpu1 5 0 5 140 0 0 0 15 0 0\n")
	got := stealFractions(before, after)
	if len(got) != 2 || got[0] != 0 || got[1] != 0.1 {
		t.Errorf("steal fractions %v, want [0 0.1]", got)
	}
	// A kernel without the steal column gives nothing, not zeros.
	if c := signal.ParseCPUTicks("cpu0 5 0 5 50 0 0 0\n"); len(c) != 0 {
		t.Errorf("no steal column: %v", c)
	}
	f := Figures{Seconds: 1, Steal: got, Others: -1, Waiting: -1}
	if f.MaxSteal() != 0.1 || f.StealOn(1) != 0.1 || f.StealOn(7) != 0 {
		t.Errorf("MaxSteal %v StealOn(1) %v", f.MaxSteal(), f.StealOn(1))
	}
	if !f.Over(0.05) || f.Over(0.1) {
		t.Errorf("10%% steal: Over(0.05) %v, Over(0.1) %v", f.Over(0.05), f.Over(0.1))
	}
	if s := f.String(); !strings.Contains(s, "steal 0.0% (CPU 0) 10.0% (CPU 1)") || strings.Contains(s, "waiting") {
		t.Errorf("String: %s", s)
	}
}

func TestParseWaiting(t *testing.T) {
	s := "some avg10=3.63 avg60=13.15 avg300=11.34 total=58212934\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	if got := parseWaiting(s); got != 58212934 {
		t.Errorf("some total %d", got)
	}
	if got := parseWaiting("garbage"); got != -1 {
		t.Errorf("garbage: %d", got)
	}
}

func TestCPUStatThrottled(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		text string
		want int64
	}{
		{"usage_usec 100\nnr_periods 5\nnr_throttled 2\nthrottled_usec 1500\n", 1_500_000}, // v2
		{"nr_periods 5\nnr_throttled 2\nthrottled_time 1500\n", 1500},                      // v1, ns
		{"usage_usec 100\n", 0},
	} {
		p := filepath.Join(dir, "cpu.stat")
		os.WriteFile(p, []byte(c.text), 0o644)
		if got := cpuStatThrottled(p); got != c.want {
			t.Errorf("%q: %d, want %d", c.text, got, c.want)
		}
	}
	if got := cpuStatThrottled(filepath.Join(dir, "none")); got != 0 {
		t.Errorf("missing file: %d", got)
	}
}

// recorder is a testing.TB that records how a test ended.
type recorder struct {
	testing.TB
	skipped string
	errors  []string
}

func (r *recorder) Helper()                     {}
func (r *recorder) Logf(string, ...any)         {}
func (r *recorder) Error(args ...any)           { r.errors = append(r.errors, args[0].(string)) }
func (r *recorder) Skipf(f string, args ...any) { r.skipped = fmt.Sprintf(f, args...) }

func TestCheck(t *testing.T) {
	quiet := Figures{Seconds: 1, RunDelay: 0.01, Steal: []float64{0, 0}, Others: 0.02, Waiting: -1}
	busy := Figures{Seconds: 1, RunDelay: 0.01, Steal: []float64{0, 0.2}, Others: 0.02, Waiting: -1}
	if (Figures{Others: 0.3}).Over(0.05) != true || quiet.Over(0.05) {
		t.Error("Over: other processes' 30% not over 5%, or a quiet run over")
	}
	for _, c := range []struct {
		f                 Figures
		failures          []string
		wantSkip, wantErr bool
	}{
		{quiet, nil, false, false},
		{busy, nil, false, false},
		{quiet, []string{"late"}, false, true},
		{busy, []string{"late"}, true, false},
	} {
		r := &recorder{TB: t}
		c.f.Check(r, 0.05, c.failures...)
		if (r.skipped != "") != c.wantSkip || (len(r.errors) > 0) != c.wantErr {
			t.Errorf("%v %v: skipped %q, errors %v", c.f, c.failures, r.skipped, r.errors)
		}
		if c.wantSkip && (!strings.Contains(r.skipped, "late") || !strings.Contains(r.skipped, "20.0% (CPU 1)")) {
			t.Errorf("skip does not name the failure and the figure: %s", r.skipped)
		}
	}
}

// A busy child is the test's own: its CPU time counts as ours, not as
// other processes'.
func TestTreeTicks(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	child := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		_, ticks, ok := parseStat(string(b))
		if !ok {
			t.Fatalf("/proc/%d/stat: %q", cmd.Process.Pid, b)
		}
		return ticks
	}
	// The tree is read before the child at the start and after it at
	// the end, so it has seen at least the child's ticks in between.
	before := treeTicks()
	c0 := child()
	for deadline := time.Now().Add(10 * time.Second); child()-c0 < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	c := child() - c0
	tree := treeTicks() - before
	t.Logf("busy child: %d ticks; the tree %d", c, tree)
	if c == 0 || tree < c {
		t.Errorf("the busy child used %d ticks, the tree counted %d", c, tree)
	}
}

func TestParseStat(t *testing.T) {
	ppid, ticks, ok := parseStat("42 (a) b (c)) R 7 42 42 0 -1 4194304 100 0 0 0 11 22 3 4 20 0 1 0 5 0 0")
	if !ok || ppid != 7 || ticks != 11+22+3+4 {
		t.Errorf("ppid %d ticks %d ok %v", ppid, ticks, ok)
	}
	if _, _, ok := parseStat("42 (a) R 7"); ok {
		t.Error("a short line parsed")
	}
}

func TestOthersShare(t *testing.T) {
	// Two CPUs over 100 ticks each, 10 of them steal on CPU 1; busy
	// 50 + 60 ticks of 190, of which ours 30.
	before := []signal.CPUTicks{{CPU: 0, Total: 1000, Idle: 500}, {CPU: 1, Total: 1000, Idle: 500, Steal: 5}}
	after := []signal.CPUTicks{{CPU: 0, Total: 1100, Idle: 550}, {CPU: 1, Total: 1100, Idle: 530, Steal: 15}}
	if got, want := othersShare(before, after, 30), 80.0/190; got != want {
		t.Errorf("others %v, want %v", got, want)
	}
	if got := othersShare(before, after, 500); got != 0 {
		t.Errorf("more ours than busy: %v", got)
	}
	if got := othersShare(nil, after, 0); got != -1 {
		t.Errorf("no readings: %v", got)
	}
}
