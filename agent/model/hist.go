package model

import (
	"math"
	"math/bits"
)

// Buckets is the number of histogram buckets (HIST_BUCKETS in
// bpf/sched.bpf.c).
const Buckets = 128

// Hist is a log-linear histogram of nanoseconds, bucketed exactly as the
// BPF side does: values below 4 have their own bucket; above, bucket
// 4*floor(log2 v) + the two bits after the leading one. Each power of two
// is split into 4 linear sub-buckets, so a bucket is at most 25% wide.
type Hist [Buckets]uint64

// Bucket returns the bucket of v (mirror of hist_bucket in C, for tests).
func Bucket(v uint64) int {
	if v < 4 {
		return int(v)
	}
	msb := 63 - bits.LeadingZeros64(v)
	idx := msb<<2 | int((v>>(msb-2))&3)
	if idx >= Buckets {
		idx = Buckets - 1
	}
	return idx
}

// BucketBounds returns the half-open range [lo, hi) of values, in ns,
// counted in bucket i. The last bucket is open-ended (hi = +Inf).
func BucketBounds(i int) (lo, hi float64) {
	if i < 4 {
		return float64(i), float64(i + 1)
	}
	msb, sub := i>>2, i&3
	if msb < 2 {
		// Buckets 4..7 are never filled (values 4..7 have msb 2).
		return 4, 4
	}
	step := math.Ldexp(1, msb-2)
	lo = float64(4+sub) * step
	hi = lo + step
	if i == Buckets-1 {
		hi = math.Inf(1)
	}
	return lo, hi
}

// Count is the number of samples.
func (h *Hist) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Sub returns h - prev, bucket by bucket (the samples taken in between).
// A bucket that went backwards (the thread was re-watched) counts as 0.
func (h *Hist) Sub(prev *Hist) Hist {
	var d Hist
	for i := range h {
		if h[i] > prev[i] {
			d[i] = h[i] - prev[i]
		}
	}
	return d
}

// Quantile returns the q-quantile (0 < q <= 1) in ns, interpolating
// linearly inside the bucket it falls in; NaN when empty. The open last
// bucket reports its lower bound.
func (h *Hist) Quantile(q float64) float64 {
	n := h.Count()
	if n == 0 {
		return math.NaN()
	}
	rank := q * float64(n)
	var cum float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			lo, hi := BucketBounds(i)
			if math.IsInf(hi, 1) {
				return lo
			}
			return lo + (hi-lo)*(rank-cum)/float64(c)
		}
		cum += float64(c)
	}
	lo, _ := BucketBounds(Buckets - 1)
	return lo
}

// CumulativeBelow returns how many samples are below 2^exp ns (a bucket
// boundary for every exp >= 2), for exporting coarse power-of-two buckets.
func (h *Hist) CumulativeBelow(exp int) uint64 {
	end := exp << 2
	if end > Buckets {
		end = Buckets
	}
	var n uint64
	for i := 0; i < end; i++ {
		n += h[i]
	}
	return n
}
