package model

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
)

func TestBucketBoundsContainValue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		v := r.Uint64() >> r.IntN(64)
		b := Bucket(v)
		lo, hi := BucketBounds(b)
		if float64(v) < lo || float64(v) >= hi {
			t.Fatalf("v=%d in bucket %d with bounds [%g,%g)", v, b, lo, hi)
		}
	}
	// The BPF side clamps at the last bucket too.
	if Bucket(math.MaxUint64) != Buckets-1 {
		t.Fatal("huge value not clamped into the last bucket")
	}
}

func TestQuantile(t *testing.T) {
	var h Hist
	if !math.IsNaN(h.Quantile(0.5)) {
		t.Fatal("empty histogram has a median")
	}
	// 1000 samples spread evenly over 1..5 ms: p50 ~ 3 ms within a bucket.
	for i := 0; i < 1000; i++ {
		h[Bucket(uint64(1e6+i*4000))]++
	}
	p50 := h.Quantile(0.5)
	if p50 < 2.5e6 || p50 > 3.5e6 {
		t.Fatalf("p50 = %g ns, want ~3e6", p50)
	}
	if p99 := h.Quantile(0.99); p99 < 4.5e6 || p99 > 5.5e6 {
		t.Fatalf("p99 = %g ns, want ~5e6", p99)
	}
	if got := h.CumulativeBelow(30); got != 1000 {
		t.Fatalf("CumulativeBelow(2^30) = %d, want 1000", got)
	}
	if got := h.CumulativeBelow(20); got != 0 { // 2^20 ns ~ 1.05 ms > 1 ms: a few
		if got > 20 {
			t.Fatalf("CumulativeBelow(2^20) = %d, want a handful", got)
		}
	}
}

func TestExpectedSliceInfiniteWhenUncontended(t *testing.T) {
	var d Counters
	d.Traced.Run[Bucket(5e6)] = 10
	if _, ok := expectedSlice(&d.Traced, Quota{}); ok {
		t.Fatal("thread never preempted has a finite slice")
	}
	th := Analyze(Input{TID: 1, Cur: &d, Start: &Counters{}, WindowStart: &Counters{}, Watched: time.Second, Window: time.Second, Tracing: true})
	if th.Contended || th.ExpectedSliceUS != nil || th.RemainingSliceUS != nil {
		t.Fatalf("uncontended thread: %+v", th)
	}
}

func TestExpectedAndRemainingSlice(t *testing.T) {
	var cur Traced
	cur.Preemptions = 100
	for i := 0; i < 100; i++ {
		cur.Slice[Bucket(4e6)]++
	}
	exp, ok := expectedSlice(&cur, Quota{})
	if !ok || exp < 3500*time.Microsecond || exp > 4500*time.Microsecond {
		t.Fatalf("expected slice %v ok=%v, want ~4ms", exp, ok)
	}
	// The quota caps it.
	if capped, _ := expectedSlice(&cur, Quota{PeriodUS: 100000, QuotaUS: 2000}); capped != 2*time.Millisecond {
		t.Fatalf("quota 2ms: expected slice %v", capped)
	}
	cur.OnCPU, cur.SwitchInNs = true, 1_000_000_000
	if rem := remainingSlice(4*time.Millisecond, &cur, 1_001_000_000); rem != 3*time.Millisecond {
		t.Fatalf("1ms into a 4ms slice: remaining %v", rem)
	}
	if rem := remainingSlice(4*time.Millisecond, &cur, 1_010_000_000); rem != 0 {
		t.Fatalf("past the slice: remaining %v", rem)
	}
	cur.OnCPU = false
	if rem := remainingSlice(4*time.Millisecond, &cur, 1_010_000_000); rem != 4*time.Millisecond {
		t.Fatalf("off CPU: remaining %v, want the whole slice", rem)
	}
}

// Totals are since the thread was first watched and rates over the
// window, both from the kernel's counters.
func TestAnalyzeTotalsAndRates(t *testing.T) {
	start := Counters{Kernel: procstat.Counters{Involuntary: 5, RunDelayNs: 0.5e9, RunNs: 1e9}}
	base := Counters{Kernel: procstat.Counters{Involuntary: 10, RunDelayNs: 1e9, RunNs: 2e9}}
	cur := Counters{Kernel: procstat.Counters{Involuntary: 110, RunDelayNs: 1.5e9, RunNs: 3e9, Timeslices: 40, Voluntary: 4}}
	th := Analyze(Input{TID: 7, VCPU: 3, Cur: &cur, Start: &start, WindowStart: &base, Watched: 5 * time.Second, Window: time.Second})
	if th.PreemptionsPerSecond != 100 {
		t.Fatalf("preemptions/s = %g, want 100", th.PreemptionsPerSecond)
	}
	if th.StealFraction != 0.5 {
		t.Fatalf("steal = %g, want 0.5", th.StealFraction)
	}
	if th.Preemptions != 105 || th.RunSeconds != 2 || th.OffCPUSeconds != 3 || th.RunnableWaitSeconds != 1 || th.Switches != 40 || th.Wakeups != 4 {
		t.Fatalf("totals since watched: %+v", th)
	}
}

// Between trace windows the on-CPU state is unknown: the thread is
// reported off CPU with its whole expected slice left, however old the
// last switch-in the programs saw.
func TestAnalyzeStateUnknownBetweenWindows(t *testing.T) {
	var cur Counters
	cur.Kernel.Involuntary = 10
	cur.Traced.Preemptions = 10
	cur.Traced.Slice[Bucket(4e6)] = 10
	cur.Traced.OnCPU, cur.Traced.SwitchInNs = true, 1e9
	in := Input{Cur: &cur, Start: &Counters{}, WindowStart: &Counters{}, Watched: time.Second, Window: time.Second, NowNs: 1e9 + 3e6}
	for _, tracing := range []bool{true, false} {
		in.Tracing = tracing
		th := Analyze(in)
		if th.ExpectedSliceUS == nil || th.RemainingSliceUS == nil {
			t.Fatalf("tracing=%v: contended thread without a slice: %+v", tracing, th)
		}
		want := *th.ExpectedSliceUS - 3000 // 3 ms into it
		if !tracing {
			want = *th.ExpectedSliceUS
		}
		if th.OnCPU != tracing || math.Abs(*th.RemainingSliceUS-want) > 1 {
			t.Errorf("tracing=%v: on_cpu %v remaining %.0f µs, want %.0f", tracing, th.OnCPU, *th.RemainingSliceUS, want)
		}
	}
}

// An exited thread's kernel counters are its last read advanced by what
// the programs saw since; its traced counters are the programs' now.
func TestExited(t *testing.T) {
	const lastNs = 10e9
	last := &Counters{
		Kernel: procstat.Counters{RunNs: 1e9, RunDelayNs: 2e8, Timeslices: 100, Voluntary: 40, Involuntary: 60},
		Traced: Traced{RunNs: 5e8, RunnableWaitNs: 1e8, Switches: 50, Preemptions: 30, Wakeups: 20, SwitchOutNs: 9e9},
	}
	// Off CPU at the last read; since, 20 intervals of 15 ms, the last
	// ending at 11 s.
	now := Traced{RunNs: 8e8, RunnableWaitNs: 1.5e8, Switches: 70, Preemptions: 45, Wakeups: 25, Throttles: 3,
		SwitchInNs: 10.985e9, SwitchOutNs: 11e9}
	got, exit := Exited(last, lastNs, &now)
	want := procstat.Counters{RunNs: 1.3e9, RunDelayNs: 2.5e8, Timeslices: 120, Voluntary: 45, Involuntary: 75}
	if got.Kernel != want {
		t.Errorf("kernel counters %+v, want %+v", got.Kernel, want)
	}
	if got.Traced != now {
		t.Errorf("traced counters %+v, want the programs' now", got.Traced)
	}
	if exit != 11e9 {
		t.Errorf("exit at %d ns, want the last switch-out at 11e9", exit)
	}
	// Counters the programs restarted (a new watch) never go backwards,
	// and a switch-out before the last read is not when it went.
	if got, exit := Exited(last, lastNs, &Traced{SwitchOutNs: 9e9}); got.Kernel != last.Kernel || exit != 0 {
		t.Errorf("programs' counters below the last read: %+v, exit %d; want the last read and no exit", got.Kernel, exit)
	}
}

// Where the programs saw the thread exit, its final counters are the
// kernel's they read then, whatever the intervals missed (one open when it
// became watched).
func TestExitedSeen(t *testing.T) {
	const lastNs = 10e9
	last := &Counters{Kernel: procstat.Counters{RunNs: 1e9, Timeslices: 3}, Traced: Traced{RunNs: 2e8}}
	exit := procstat.Counters{RunNs: 2.5e9, RunDelayNs: 1e7, Timeslices: 9, Voluntary: 1, Involuntary: 8}
	now := Traced{RunNs: 5e8, Switches: 6, SwitchOutNs: 11.5e9, ExitNs: 11.5e9, Exit: exit}
	got, at := Exited(last, lastNs, &now)
	if got.Kernel != exit || got.Traced != now || at != 11.5e9 {
		t.Errorf("exited: %+v at %d, want the kernel's counters at the exit, 11.5e9", got, at)
	}
}

// The on-CPU interval open at the last read: counted once, whether the
// programs saw it begin or not.
func TestExitedOpenInterval(t *testing.T) {
	const lastNs = 10e9
	for _, tt := range []struct {
		name      string
		last, now Traced
		want      uint64
	}{
		{"on CPU from before the watch to the exit, never switched in while watched",
			Traced{}, Traced{SwitchOutNs: 11.5e9}, 1.5e9},
		{"switched in at 9.5 s, exits at 11 s",
			Traced{RunNs: 1e9, Switches: 7, OnCPU: true, SwitchInNs: 9.5e9},
			Traced{RunNs: 2.5e9, Switches: 7, SwitchInNs: 9.5e9, SwitchOutNs: 11e9}, 1e9},
		{"switched in at 9.5 s, out at 10.5, in again for 0.2 s",
			Traced{RunNs: 1e9, Switches: 7, OnCPU: true, SwitchInNs: 9.5e9},
			Traced{RunNs: 2.2e9, Switches: 8, SwitchInNs: 10.8e9, SwitchOutNs: 11e9}, 0.7e9},
		{"asleep at the read, ran 0.3 s since",
			Traced{RunNs: 1e9, Switches: 7, SwitchInNs: 9e9, SwitchOutNs: 9.1e9},
			Traced{RunNs: 1.3e9, Switches: 9, SwitchInNs: 10.7e9, SwitchOutNs: 10.9e9}, 0.3e9},
		{"on CPU, not seen since (tracing stopped)",
			Traced{RunNs: 1e9, Switches: 7, OnCPU: true, SwitchInNs: 9.5e9},
			Traced{RunNs: 1e9, Switches: 7, OnCPU: true, SwitchInNs: 9.5e9}, 0},
	} {
		last := &Counters{Kernel: procstat.Counters{RunNs: 5e9}, Traced: tt.last}
		got, _ := Exited(last, lastNs, &tt.now)
		if run := got.Kernel.RunNs - 5e9; run != tt.want {
			t.Errorf("%s: ran %d ns since the read, want %d", tt.name, run, tt.want)
		}
	}
}

// Live leaves gone targets and gone threads out without touching the
// snapshot it is called on.
func TestLive(t *testing.T) {
	s := Snapshot{Targets: []Target{
		{Name: "a", Threads: []Thread{{TID: 1}, {TID: 2, Gone: true}, {TID: 3}}},
		{Name: "b", Gone: true, Threads: []Thread{{TID: 4, Gone: true}}},
	}}
	live := s.Live()
	if len(live.Targets) != 1 || live.Targets[0].Name != "a" {
		t.Fatalf("live targets %+v, want a only", live.Targets)
	}
	if th := live.Targets[0].Threads; len(th) != 2 || th[0].TID != 1 || th[1].TID != 3 {
		t.Fatalf("live threads %+v, want 1 and 3", th)
	}
	if len(s.Targets) != 2 || len(s.Targets[0].Threads) != 3 || s.Targets[0].Threads[1].TID != 2 {
		t.Fatalf("Live changed its snapshot: %+v", s.Targets)
	}
}
