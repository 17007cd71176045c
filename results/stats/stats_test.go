package stats

import (
	"math"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestMedianCI checks the order statistics and levels against the
// binomial by hand: below 6 values [min, max] at 1 - 2^(1-n); at 6, still
// k = 1 (97%, since k = 2 gives 78%); at 17, k = 5 (95.1%; k = 6 gives 86%).
func TestMedianCI(t *testing.T) {
	seq := func(n int) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(n - i) // descending: the function must sort
		}
		return xs
	}
	for _, tc := range []struct {
		n             int
		lo, hi, level float64
	}{
		{1, 1, 1, 0}, {4, 1, 4, 0.875}, {5, 1, 5, 0.9375}, {6, 1, 6, 1 - 2.0/64},
		{17, 5, 13, 1 - 2*(1.0+17+136+680+2380)/131072},
	} {
		lo, hi, level := MedianCI(seq(tc.n))
		if lo != tc.lo || hi != tc.hi || math.Abs(level-tc.level) > 1e-12 {
			t.Errorf("n=%d: [%v, %v] at %v, want [%v, %v] at %v", tc.n, lo, hi, level, tc.lo, tc.hi, tc.level)
		}
	}
}
