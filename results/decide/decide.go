// Package decide is the decision rule of `vgpu-probe advise`: which way to
// run a program, from its repetitions alone and beside busy neighbours.
package decide

import (
	"fmt"
	"math"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Paired is a paired ratio with its interval (apptable.Pair).
type Paired = apptable.Paired

// The decision rule of `vgpu-probe advise`: which way to run a program,
// from each way's paired ratio of time per step to the command as it is
// (cuda-default), alone and beside a busy neighbour, read against the
// A/A control's ratio in the same setting.

// MinNoise is the smallest difference advise calls one: the A/A interval
// of a quiet machine can be narrower, but a gain under 1% is not worth
// running a program differently for, and a loss under 1% not worth a
// warning.
const MinNoise = 0.01

// minLevel is the lowest confidence level at which an interval decides
// anything: 75%, that of [min, max] over 3 repetitions.
const minLevel = 0.75

// Way is one way of running the program with its paired ratios of time
// per step to the command as it is (cuda-default), alone and beside a
// busy neighbour; nil where no repetition has both.
type Way struct {
	Arm              string
	Alone, Contended *Paired
	// Failed says why the program failed in this way; such a way is
	// never recommended.
	Failed string
}

// Standing is a way's standing against the command as it is in one
// setting, decided by its interval against the setting's A/A ratio
// (standing).
type Standing string

const (
	Open   Standing = "open"   // the interval straddles an edge of the band, or its level is under 75%
	Better Standing = "better" // all of it below 1 - max(1%, A/A bias), its median below the A/A interval: faster
	Same   Standing = "same"   // all of it within the band
	Worse  Standing = "worse"  // all of it above the band: slower
)

// Noise is the band advise reads a setting's ratios against: the width
// of the A/A ratio's interval, or the distance of its farther end from 1
// where that is larger (two runs of one arm that differ by their order
// or their place in time), and at least MinNoise. The A/A interval
// narrows with repetitions as the ways' intervals do, so a way the same
// as the command as it is lands within the band, and one that differs
// by more than MinNoise lands beyond it, given enough repetitions.
// Without an A/A ratio it is +Inf: nothing is decided.
func Noise(aa *Paired) float64 {
	if aa == nil {
		return math.Inf(1)
	}
	lo, hi := aa.CI[0], aa.CI[1]
	return max(MinNoise, hi-lo, hi-1, 1-lo)
}

// bias is how far the A/A interval lies from 1 (0 where it holds 1):
// a shift that two runs of one arm show by their order or their place in
// time, which a way's own interval cannot see. Without an A/A ratio it is
// +Inf.
func bias(aa *Paired) float64 {
	if aa == nil {
		return math.Inf(1)
	}
	return max(0, aa.CI[0]-1, 1-aa.CI[1])
}

// standing places the interval of p against the setting's A/A ratio aa.
// Same and worse read it against the band 1 ± Noise: a way is the same
// as the command as it is when its interval is no wider a spread than
// two runs of one arm show. Better needs less than the band: the way's
// interval already holds the spread of the runs it is paired with (a
// bimodal program's A/A interval spans both modes, far wider than a way
// that leaves the slow mode behind), so it is better when its whole
// interval is below 1 by more than MinNoise and the A/A bias, and its
// median below the A/A interval: faster than two runs of one arm ever
// were apart.
func standing(p, aa *Paired) Standing {
	noise := Noise(aa)
	if p == nil || p.Level < minLevel || math.IsInf(noise, 1) {
		return Open
	}
	lo, hi := p.CI[0], p.CI[1]
	switch {
	case hi < 1-max(MinNoise, bias(aa)) && p.Median < aa.CI[0]:
		return Better
	case lo > 1+noise:
		return Worse
	case lo >= 1-noise && hi <= 1+noise:
		return Same
	}
	return Open
}

// WayVerdict is a way as Decide judged it.
type WayVerdict struct {
	Arm         string   `json:"arm"`
	Alone       *Paired  `json:"alone,omitempty"`
	Contended   *Paired  `json:"contended,omitempty"`
	AloneIs     Standing `json:"alone_is"`
	ContendedIs Standing `json:"contended_is"`
	// Recommendable: better in one setting and better or the same in
	// the other.
	Recommendable bool `json:"recommendable"`
	// Excluded: it cannot become recommendable with more repetitions
	// (worse in a setting, the same in both, or failed).
	Excluded bool `json:"excluded"`
	// Score is the geometric mean of its two median ratios: the ways are
	// ranked by it, lowest first.
	Score  float64 `json:"score"`
	Failed string  `json:"failed,omitempty"`
}

// Advice is Decide's answer.
type Advice struct {
	// Arm is the way recommended; "" for the command as it is.
	Arm string `json:"arm"`
	// Decided: the intervals settle it, so more repetitions would not
	// change it (the best way is recommendable, or every way is
	// excluded).
	Decided        bool         `json:"decided"`
	NoiseAlone     float64      `json:"noise_alone"`
	NoiseContended float64      `json:"noise_contended"`
	Ways           []WayVerdict `json:"ways"`
}

// Decide judges the ways against the command as it is, with the A/A
// ratios alone and beside the busy neighbour. A way is recommendable
// when it is better in one setting and better or the same in the other:
// never one that is slower alone by more than the A/A noise, or not yet
// known not to be. The advice is the recommendable way of the lowest
// score, and decided when that way is also the lowest-scoring of the
// ways not excluded, or when every way is excluded.
func Decide(ways []Way, aaAlone, aaContended *Paired) Advice {
	a := Advice{NoiseAlone: Noise(aaAlone), NoiseContended: Noise(aaContended)}
	best, bestOpen := -1, -1
	for _, w := range ways {
		v := WayVerdict{Arm: w.Arm, Alone: w.Alone, Contended: w.Contended, Failed: w.Failed,
			AloneIs: standing(w.Alone, aaAlone), ContendedIs: standing(w.Contended, aaContended), Score: math.Inf(1)}
		if w.Alone != nil && w.Contended != nil {
			v.Score = math.Sqrt(w.Alone.Median * w.Contended.Median)
		}
		s := [2]Standing{v.AloneIs, v.ContendedIs}
		anyIs := func(x Standing) bool { return s[0] == x || s[1] == x }
		okIs := func(x Standing) bool { return x == Better || x == Same }
		v.Recommendable = w.Failed == "" && anyIs(Better) && okIs(s[0]) && okIs(s[1])
		v.Excluded = w.Failed != "" || anyIs(Worse) || (s[0] == Same && s[1] == Same)
		a.Ways = append(a.Ways, v)
		i := len(a.Ways) - 1
		if v.Recommendable && (best < 0 || v.Score < a.Ways[best].Score) {
			best = i
		}
		if !v.Excluded && (bestOpen < 0 || v.Score < a.Ways[bestOpen].Score) {
			bestOpen = i
		}
	}
	if best >= 0 {
		a.Arm = a.Ways[best].Arm
	}
	a.Decided = bestOpen < 0 || (best >= 0 && a.Ways[best].Score <= a.Ways[bestOpen].Score)
	return a
}

// Way returns the verdict of the way arm (nil if it was not judged).
func (a *Advice) Way(arm string) *WayVerdict {
	for i := range a.Ways {
		if a.Ways[i].Arm == arm {
			return &a.Ways[i]
		}
	}
	return nil
}

// Line is the one recommendation line: how to run the program (runWith
// by arm: the command line in that way), by how much it gains in each
// setting with the interval, or that no way is measurably better, with
// the noise; cpus names the neighbours (one CPU, or a busy loop on each
// of N) and reps the repetitions it stands on.
func (a *Advice) Line(runWith map[string]string, cpus, reps int) string {
	busy := "beside a busy neighbour"
	if cpus > 1 {
		busy = fmt.Sprintf("beside a busy neighbour on each of its %d CPUs", cpus)
	}
	n := fmt.Sprintf("%d repetitions", reps)
	if reps == 1 {
		n = "1 repetition"
	}
	w := a.Way(a.Arm)
	if w == nil {
		open := ""
		if !a.Decided {
			var names []string
			for _, v := range a.Ways {
				if !v.Excluded {
					names = append(names, v.Arm)
				}
			}
			if len(names) > 0 {
				open = fmt.Sprintf("; still open: %s (--max-reps or --max-time for more)", strings.Join(names, ", "))
			}
		}
		return fmt.Sprintf("No way is measurably better here than as it is (noise ±%s alone, ±%s %s; %s%s)",
			Percent(a.NoiseAlone), Percent(a.NoiseContended), busy, n, open)
	}
	contended := phrase(w.ContendedIs, w.Contended, a.NoiseContended, busy)
	alone := phrase(w.AloneIs, w.Alone, a.NoiseAlone, "alone")
	first, second := contended, alone
	if w.ContendedIs != Better {
		first, second = alone, contended
	}
	return fmt.Sprintf("Run it %s: %s, %s (%s)", runWith[w.Arm], strings.Replace(first, "faster", "faster than as it is", 1), second, n)
}

// phrase says how a way stands in one setting: "31% faster beside a busy
// neighbour [24%, 38%]" (faster: that much less time per step), or "the
// same alone (±2%)".
func phrase(s Standing, p *Paired, noise float64, where string) string {
	if s == Better {
		return fmt.Sprintf("%s faster %s [%s, %s]", Percent(1-p.Median), where, Percent(1-p.CI[1]), Percent(1-p.CI[0]))
	}
	return fmt.Sprintf("the same %s (±%s)", where, Percent(noise))
}

// Percent formats a fraction as a percentage: whole percents from 10%, one
// decimal below.
func Percent(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "?%"
	}
	if math.Abs(f) >= 0.095 {
		return fmt.Sprintf("%.0f%%", 100*f)
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}
