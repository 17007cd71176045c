package crossing

import (
	"strconv"
	"testing"
)

// BenchmarkIntoC: a call from Go into C, as the policy's spin makes one
// per query.
func BenchmarkIntoC(b *testing.B) {
	IntoC(1)
	b.ResetTimer()
	IntoC(b.N)
}

// BenchmarkFromC: a call from a C thread into Go after gap of work in C,
// as a wait through the Go policy makes one; against BenchmarkInC, the
// same loop calling C. switches/op: the process's context switches per
// call (the Go runtime's threads that the call wakes).
func BenchmarkFromC(b *testing.B) {
	for _, gap := range []int64{0, 20_000, 1_000_000} {
		b.Run("gap="+strconv.FormatInt(gap, 10)+"ns", func(b *testing.B) { report(b, FromC, gap) })
	}
}

func BenchmarkInC(b *testing.B) {
	for _, gap := range []int64{0, 20_000, 1_000_000} {
		b.Run("gap="+strconv.FormatInt(gap, 10)+"ns", func(b *testing.B) { report(b, InC, gap) })
	}
}

func report(b *testing.B, f func(int, int64) (int64, int64), gap int64) {
	ns, sw := f(b.N, gap)
	b.ReportMetric(float64(ns)/float64(b.N), "call-ns/op")
	b.ReportMetric(float64(sw)/float64(b.N), "switches/op")
}

// TestCrossings keeps the benchmarks' code working (no timing judged).
func TestCrossings(t *testing.T) {
	IntoC(10)
	FromC(10, 1000)
	InC(10, 1000)
}
