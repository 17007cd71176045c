package decide

import (
	"cmp"
	"slices"

	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Lead is the fastest mode of one setting, by Test against every other.
type Lead struct {
	// Best has the least median time, Next the second; Margin is Next's
	// median over Best's, less 1.
	Best, Next string
	Margin     float64
	// Sign is Best against every other mode at once: a win is a
	// repetition where it beat them all by MinNoise.
	Sign Sign
}

// Ahead: Best beat every other mode in too many repetitions for chance.
func (l Lead) Ahead() bool { return l.Sign.Ahead() }

// Fastest ranks the modes of one setting by their median time and tests
// the first against all the others (Test, margin MinNoise); "" Best
// without times.
func Fastest(modes map[string]Times) Lead {
	type ranked struct {
		mode string
		med  float64
	}
	var rs []ranked
	for m, t := range modes {
		var v []float64
		for _, x := range t {
			v = append(v, x)
		}
		if len(v) > 0 {
			rs = append(rs, ranked{m, stats.Median(v)})
		}
	}
	slices.SortFunc(rs, func(a, b ranked) int { return cmp.Or(cmp.Compare(a.med, b.med), cmp.Compare(a.mode, b.mode)) })
	var l Lead
	if len(rs) == 0 {
		return l
	}
	l.Best = rs[0].mode
	if len(rs) == 1 {
		return l
	}
	l.Next, l.Margin = rs[1].mode, rs[1].med/rs[0].med-1
	var others []Times
	for _, r := range rs[1:] {
		others = append(others, modes[r.mode])
	}
	l.Sign = Test(modes[l.Best], others, MinNoise)
	return l
}
