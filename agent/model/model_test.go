package model

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
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
	d.Run[Bucket(5e6)] = 10
	if _, ok := ExpectedSlice(&d, Quota{}); ok {
		t.Fatal("thread never preempted has a finite slice")
	}
	th := Analyze(1, 0, &d, &Counters{}, time.Second, 0, Quota{})
	if th.Contended || th.ExpectedSliceUS != nil || th.RemainingSliceUS != nil {
		t.Fatalf("uncontended thread: %+v", th)
	}
}

func TestExpectedAndRemainingSlice(t *testing.T) {
	var cur Counters
	cur.Preemptions = 100
	for i := 0; i < 100; i++ {
		cur.Slice[Bucket(4e6)]++
	}
	exp, ok := ExpectedSlice(&cur, Quota{})
	if !ok || exp < 3500*time.Microsecond || exp > 4500*time.Microsecond {
		t.Fatalf("expected slice %v ok=%v, want ~4ms", exp, ok)
	}
	// The quota caps it.
	if capped, _ := ExpectedSlice(&cur, Quota{PeriodUS: 100000, QuotaUS: 2000}); capped != 2*time.Millisecond {
		t.Fatalf("quota 2ms: expected slice %v", capped)
	}
	cur.OnCPU, cur.SwitchInNs = true, 1_000_000_000
	if rem := RemainingSlice(4*time.Millisecond, &cur, 1_001_000_000); rem != 3*time.Millisecond {
		t.Fatalf("1ms into a 4ms slice: remaining %v", rem)
	}
	if rem := RemainingSlice(4*time.Millisecond, &cur, 1_010_000_000); rem != 0 {
		t.Fatalf("past the slice: remaining %v", rem)
	}
	cur.OnCPU = false
	if rem := RemainingSlice(4*time.Millisecond, &cur, 1_010_000_000); rem != 4*time.Millisecond {
		t.Fatalf("off CPU: remaining %v, want the whole slice", rem)
	}
}

func TestAnalyzeRatesOverWindow(t *testing.T) {
	base := Counters{Preemptions: 10, RunnableWaitNs: 1e9}
	cur := Counters{Preemptions: 110, RunnableWaitNs: 1.5e9, RunNs: 2e9}
	th := Analyze(7, 3, &cur, &base, time.Second, 0, Quota{})
	if th.PreemptionsPerSecond != 100 {
		t.Fatalf("preemptions/s = %g, want 100", th.PreemptionsPerSecond)
	}
	if th.StealFraction != 0.5 {
		t.Fatalf("steal = %g, want 0.5", th.StealFraction)
	}
	if th.Preemptions != 110 || th.RunSeconds != 2 {
		t.Fatalf("totals not cumulative: %+v", th)
	}
}
