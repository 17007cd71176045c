// Package stats is the statistics the tables of bench, apps and report give: the
// median and a confidence interval for it that assumes nothing of the
// distribution.
package stats

import (
	"math"
	"slices"
)

// Median of xs: the mean of the middle two for an even count (gonum's
// stat.Quantile returns one of them instead); 0 if xs is empty.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MedianCI returns a confidence interval for the median of xs that
// assumes nothing of their distribution: the order statistics x(k) and
// x(n+1-k), with the largest k whose level 1 - 2 P(Binomial(n, 1/2) < k)
// is at least 95%, and that level. Below 6 values no k reaches 95%: the
// interval is then [min, max], at its level (94% for 5, 88% for 4). xs
// must not be empty.
func MedianCI(xs []float64) (lo, hi, level float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	// tail = P(Binomial(n, 1/2) < k), built up term by term.
	term := math.Pow(0.5, float64(n))
	k, tail := 1, term // P(X < 1) = P(X = 0)
	level = 1 - 2*tail
	for k+1 <= (n+1)/2 {
		term *= float64(n-k+1) / float64(k) // P(X = k)
		if 1-2*(tail+term) < 0.95 {
			break
		}
		tail += term
		k++
		level = 1 - 2*tail
	}
	return s[k-1], s[n-k], level
}

// MinMax returns the smallest and largest of xs (+Inf and -Inf if empty).
func MinMax(xs []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}
