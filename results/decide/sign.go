package decide

import (
	"math"
	"slices"
)

// Alpha is the sign test's level: a way is ahead (or behind) when a
// count of wins (or losses) as large would come by chance, were every
// arm alike, at most once in fifty.
const Alpha = 0.02

// Times are one arm's times per step in one setting, by repetition: the
// arms of a repetition run back to back, so they are compared within it.
type Times map[int]float64

// Sign is the paired sign test of one arm against the others it ran
// beside, over the repetitions in which all of them ran.
type Sign struct {
	N int `json:"n"`
	// Wins counts the repetitions where the arm took less time than
	// every other by more than Margin; Losses those where it took more
	// than every other by more than Margin.
	Wins   int `json:"wins"`
	Losses int `json:"losses"`
	// P0 is the chance of a win, and of a loss, in one repetition were
	// all the arms alike: 1 / (1 + the others).
	P0     float64 `json:"p0"`
	Margin float64 `json:"margin"`
}

// Test is the one comparison every verdict of the project rests on
// (advise's ways, report's fastest mode): x against others, repetition
// by repetition, as a sign test. A win needs x below every other by more
// than margin, so an arm that matches the others wins a repetition by
// chance once in 1+len(others) at most; the more arms it must beat, the
// fewer repetitions decide. It assumes nothing of the times'
// distribution, so a program whose runs fall in two modes, or a
// neighbour that now and then takes the CPU for seconds, moves the count
// by one repetition, never the verdict by its size.
func Test(x Times, others []Times, margin float64) Sign {
	s := Sign{P0: 1 / float64(1+len(others)), Margin: margin}
	for _, rep := range reps(x) {
		lo, hi, ok := bounds(rep, others)
		if !ok || x[rep] <= 0 {
			continue
		}
		s.N++
		switch {
		case x[rep] < (1-margin)*lo:
			s.Wins++
		case x[rep] > (1+margin)*hi:
			s.Losses++
		}
	}
	return s
}

// reps are the repetitions of x in order.
func reps(x Times) []int {
	var out []int
	for r := range x {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// bounds are the least and greatest time of the others in repetition
// rep; ok is false unless every one of them ran in it.
func bounds(rep int, others []Times) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), 0
	for _, o := range others {
		t, ran := o[rep]
		if !ran || t <= 0 {
			return 0, 0, false
		}
		lo, hi = min(lo, t), max(hi, t)
	}
	return lo, hi, len(others) > 0
}

// Ahead: the wins are too many for chance at Alpha.
func (s Sign) Ahead() bool { return s.N > 0 && tail(s.N, s.Wins, s.P0) <= Alpha }

// Behind: the losses are too many for chance at Alpha.
func (s Sign) Behind() bool { return s.N > 0 && tail(s.N, s.Losses, s.P0) <= Alpha }

// Decisive: the repetitions are enough for the test to find an arm ahead
// had it won them all. Before, that an arm is no better is not yet
// known, however alike the times.
func (s Sign) Decisive() bool { return s.N > 0 && tail(s.N, s.N, s.P0) <= Alpha }

// P is the chance of at least as many wins were all the arms alike.
func (s Sign) P() float64 { return tail(s.N, s.Wins, s.P0) }

// tail is P(Binomial(n, p) >= k).
func tail(n, k int, p float64) float64 {
	sum := 0.0
	for i := k; i <= n; i++ {
		sum += binom(n, i) * math.Pow(p, float64(i)) * math.Pow(1-p, float64(n-i))
	}
	return min(1, sum)
}

// binom is n choose k.
func binom(n, k int) float64 {
	c := 1.0
	for i := range k {
		c = c * float64(n-i) / float64(i+1)
	}
	return c
}
