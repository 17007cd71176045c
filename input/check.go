package input

import "fmt"

// Bounds of the numbers a measurement can hold. Past them a value is a
// corrupt or hand-made file, and printing it would give a 309-digit
// column or a negative slowdown rather than a report.
const (
	// MaxSeconds is about 32 years: no run vgpu-probe measures, nor the
	// CPU time all its threads spend, comes near.
	MaxSeconds = 1e9
	// MaxUS is MaxSeconds in µs.
	MaxUS = MaxSeconds * 1e6
	// MaxRatio bounds a slowdown (one wall time over another): the
	// paper's worst is 6.7x.
	MaxRatio = 1e6
	// MaxRate bounds events per second (kernels, preemptions): a kernel
	// launch or a context switch costs at least a few hundred ns.
	MaxRate = 1e9
	// MaxCount bounds small counts: CPUs, vCPUs, co-runners, repetitions.
	MaxCount = 1 << 20
)

// Check remembers the first number of a decoded input that is out of its
// range (NaN and infinities included), named by its field path in the
// file, e.g. "cells[3].median.wall_s". The zero value is ready to use.
type Check struct{ err error }

// Range wants lo <= v <= hi.
func (c *Check) Range(field string, v, lo, hi float64) {
	if c.err == nil && !(v >= lo && v <= hi) {
		c.err = fmt.Errorf("%s = %g, want %g to %g", field, v, lo, hi)
	}
}

// Positive wants 0 < v <= hi: a time that must have passed.
func (c *Check) Positive(field string, v, hi float64) {
	if c.err == nil && !(v > 0 && v <= hi) {
		c.err = fmt.Errorf("%s = %g, want more than 0 and at most %g", field, v, hi)
	}
}

// Count wants 0 <= n <= MaxCount.
func (c *Check) Count(field string, n int) { c.Range(field, float64(n), 0, MaxCount) }

// Failf records a relation between fields that cannot hold.
func (c *Check) Failf(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

// Err is the first failure, nil if none.
func (c *Check) Err() error { return c.err }
