// Package decide is the decision rule of `vgpu-probe advise` and of the
// fastest mode `vgpu-probe report` names: which way to run a program,
// from its repetitions alone and beside busy neighbours, each way's time
// compared within the repetition it ran in (Test).
package decide

import (
	"math"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Rule is the decision rule in words: advise's --help quotes it, and
// docs/experiments.md says the same.
const Rule = `In each repetition every way runs once in each setting (alone, and beside
busy loops in each of their patterns), and the program as it is runs
twice (cuda-default and cuda-default-again, the A/A control). A way wins a
repetition when it took less time per step than both runs as it is by
more than the margin (1%, or more where the two runs as it is differ by
their order: the A/A interval's distance from 1), and loses it when it
took more than both by as much. A way is better in a setting when it won
so many repetitions that all the ways being alike would give as many wins
less than once in fifty (the sign test: 4 of 4, 5 of 6, 6 of 8); worse
when it lost that many, or its median ratio's interval lies above
1 + noise; the same when that interval lies within 1 ± noise, the noise
being the A/A ratio's spread (at least 1%), over enough repetitions for
the sign test to have found it better (4 with the A/A control); open
otherwise. A way is
recommended when it is better in one setting and better or the same in
every other, so never one measurably slower alone; among several, the one
of the lowest geometric mean of its median ratios. The gain shown is the
median of its paired ratios to the program as it is, with their
order-statistic interval. Repetitions stop when the advice can no longer
change: the best way still possible is recommended, or every way is
worse somewhere, the same everywhere, or failed.`

// Paired is a paired ratio with its interval (apptable.Pair).
type Paired = apptable.Paired

// MinNoise is the smallest difference advise calls one: the A/A interval
// of a quiet machine can be narrower, but a gain under 1% is not worth
// running a program differently for, and a loss under 1% not worth a
// warning.
const MinNoise = 0.01

// minLevel is the lowest confidence level at which an interval decides
// that a way is the same or worse: 75%, that of [min, max] over 3
// repetitions.
const minLevel = 0.75

// Setting is the program as it is in one setting: its name
// (apptable's: none, while1x4-1s) and its two runs of each repetition.
type Setting struct {
	Name        string
	AsIs, Again Times
}

// Way is one way of running the program: its times in each setting, in
// the order of Decide's settings.
type Way struct {
	Arm   string
	Times []Times
	// Failed says why the program failed in this way; such a way is
	// never recommended.
	Failed string
}

// Standing is a way's standing against the command as it is in one
// setting.
type Standing string

const (
	Open   Standing = "open"   // neither of the others yet
	Better Standing = "better" // ahead of both runs as it is by the sign test
	Same   Standing = "same"   // its interval within 1 ± noise
	Worse  Standing = "worse"  // behind both runs by the sign test, or its interval above the band
)

// PairedOf is the median of x's time over ref's by repetition, with its
// order-statistic interval; nil where no repetition has both.
func PairedOf(x, ref Times) *Paired {
	var rs []float64
	for _, rep := range reps(x) {
		if r, ok := ref[rep]; ok && r > 0 && x[rep] > 0 {
			rs = append(rs, x[rep]/r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	lo, hi, level := stats.MedianCI(rs)
	return &Paired{Median: stats.Median(rs), CI: [2]float64{lo, hi}, Level: level, N: len(rs)}
}

// Noise is the band Same and Worse read a setting's ratios against: the
// width of the A/A ratio's interval, or the distance of its farther end
// from 1 where that is larger (two runs of one arm that differ by their
// order or their place in time), and at least MinNoise. Without an A/A
// ratio it is +Inf: nothing is the same.
func Noise(aa *Paired) float64 {
	if aa == nil {
		return math.Inf(1)
	}
	lo, hi := aa.CI[0], aa.CI[1]
	return max(MinNoise, hi-lo, hi-1, 1-lo)
}

// Margin is what a win must clear: MinNoise, or the A/A interval's
// distance from 1 where it lies wholly to one side, a shift two runs of
// one arm show by their order or place in time.
func Margin(aa *Paired) float64 {
	if aa == nil {
		return MinNoise
	}
	return max(MinNoise, aa.CI[0]-1, 1-aa.CI[1])
}

// Judged is a way in one setting as the rule sees it.
type Judged struct {
	Setting string   `json:"setting"`
	Is      Standing `json:"is"`
	// Paired is its median ratio to the program as it is, with its
	// interval; nil where no repetition has both.
	Paired *Paired `json:"paired,omitempty"`
	Sign   Sign    `json:"sign"`
}

// judge places a way's times in one setting against the program as it
// is there.
func judge(x Times, s Setting) Judged {
	aa := PairedOf(s.Again, s.AsIs)
	others := []Times{s.AsIs}
	if len(s.Again) > 0 {
		others = append(others, s.Again)
	}
	j := Judged{Setting: s.Name, Paired: PairedOf(x, s.AsIs), Sign: Test(x, others, Margin(aa))}
	noise := Noise(aa)
	p := j.Paired
	sure := p != nil && p.Level >= minLevel && !math.IsInf(noise, 1)
	switch {
	case j.Sign.Ahead():
		j.Is = Better
	case j.Sign.Behind() || (sure && p.CI[0] > 1+noise):
		j.Is = Worse
	case sure && p.CI[0] >= 1-noise && p.CI[1] <= 1+noise && j.Sign.Decisive():
		j.Is = Same
	default:
		j.Is = Open
	}
	return j
}

// WayVerdict is a way as Decide judged it.
type WayVerdict struct {
	Arm string `json:"arm"`
	// In is its standing in each setting, in Decide's order: alone
	// first.
	In []Judged `json:"settings"`
	// Recommendable: better in one setting and better or the same in
	// every other.
	Recommendable bool `json:"recommendable"`
	// Excluded: it cannot become recommendable with more repetitions
	// (worse in a setting, the same in all, or failed).
	Excluded bool `json:"excluded"`
	// Score is the geometric mean of its median ratios: the ways are
	// ranked by it, lowest first.
	Score  float64 `json:"score"`
	Failed string  `json:"failed,omitempty"`
}

// Advice is Decide's answer.
type Advice struct {
	// Arm is the way recommended; "" for the command as it is.
	Arm string `json:"arm"`
	// Decided: more repetitions would not change it (the best way is
	// recommendable, or every way is excluded).
	Decided bool `json:"decided"`
	// Noise is each setting's (Noise), in Decide's order.
	Noise []SettingNoise `json:"noise"`
	Ways  []WayVerdict   `json:"ways"`
}

// SettingNoise is a setting's noise band.
type SettingNoise struct {
	Setting string  `json:"setting"`
	Noise   float64 `json:"noise"`
}

// verdictOf judges one way in every setting.
func verdictOf(w Way, settings []Setting) WayVerdict {
	v := WayVerdict{Arm: w.Arm, Failed: w.Failed}
	logSum, all := 0.0, true
	for i, s := range settings {
		var x Times
		if i < len(w.Times) {
			x = w.Times[i]
		}
		j := judge(x, s)
		v.In = append(v.In, j)
		if j.Paired == nil {
			all = false
		} else {
			logSum += math.Log(j.Paired.Median)
		}
	}
	v.Score = math.Inf(1)
	if all && len(settings) > 0 {
		v.Score = math.Exp(logSum / float64(len(settings)))
	}
	count := map[Standing]int{}
	for _, j := range v.In {
		count[j.Is]++
	}
	v.Recommendable = w.Failed == "" && count[Better] > 0 && count[Better]+count[Same] == len(v.In)
	v.Excluded = w.Failed != "" || count[Worse] > 0 || count[Same] == len(v.In)
	return v
}

// Decide judges the ways against the command as it is in each setting
// (alone first, then beside the busy neighbours), by Rule. The advice is
// the recommendable way of the lowest score, and decided when that way
// is also the lowest-scoring of the ways not excluded, or when every way
// is excluded.
func Decide(ways []Way, settings []Setting) Advice {
	var a Advice
	for _, s := range settings {
		a.Noise = append(a.Noise, SettingNoise{s.Name, Noise(PairedOf(s.Again, s.AsIs))})
	}
	best, bestOpen := -1, -1
	for i, w := range ways {
		v := verdictOf(w, settings)
		a.Ways = append(a.Ways, v)
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
