package decide

import (
	"fmt"
	"math"
	"strings"
)

// Measured is what the advice stands on, as the line says it: the
// repetitions that ran and the settings as measured.
type Measured struct {
	Reps int
	// CPUs the program ran on, with a busy loop on each beside it.
	CPUs int
	// Pattern is when the loops were there: "" or "start" for the whole
	// run (apptable.Patterns).
	Pattern string
}

// busy names the contended setting.
func (m Measured) busy() string {
	n := "a busy loop on its CPU"
	if m.CPUs > 1 {
		n = fmt.Sprintf("a busy loop on each of its %d CPUs", m.CPUs)
	}
	switch m.Pattern {
	case "", "start":
		return "beside " + n
	case "late":
		return "beside " + n + " started after its ready line"
	}
	return fmt.Sprintf("beside %s coming and going (%s on, %s off)", n, m.Pattern, m.Pattern)
}

func (m Measured) reps() string {
	if m.Reps == 1 {
		return "1 repetition"
	}
	return fmt.Sprintf("%d repetitions", m.Reps)
}

// Line is the one recommendation line: how to run the program (runWith
// by arm: the command line in that way), by how much it gains in each
// setting with the interval, or that no way is measurably better, with
// the noise and what stands in the way.
func (a *Advice) Line(runWith map[string]string, m Measured) string {
	busy := m.busy()
	w := a.Way(a.Arm)
	if w == nil {
		return fmt.Sprintf("No way is measurably better here than as it is (noise ±%s alone, ±%s %s; %s%s)",
			Percent(a.NoiseAlone), Percent(a.NoiseContended), busy, m.reps(), a.why())
	}
	contended := phrase(w.ContendedIs, w.Contended, a.NoiseContended, busy)
	alone := phrase(w.AloneIs, w.Alone, a.NoiseAlone, "alone")
	first, second := contended, alone
	if w.ContendedIs != Better {
		first, second = alone, contended
	}
	return fmt.Sprintf("Run it %s: %s, %s (%s)", runWith[w.Arm], strings.Replace(first, "faster", "faster than as it is", 1), second, m.reps())
}

// why says what kept each near way from being recommended: a trade (better
// in one setting, worse in the other) and the ways still open.
func (a *Advice) why() string {
	var trades, open []string
	for _, v := range a.Ways {
		switch {
		case v.Failed != "":
		case v.AloneIs == Worse && v.ContendedIs == Better:
			trades = append(trades, fmt.Sprintf("%s is %s faster beside the loops but %s slower alone", v.Arm,
				Percent(1-v.Contended.Median), Percent(v.Alone.Median-1)))
		case v.ContendedIs == Worse && v.AloneIs == Better:
			trades = append(trades, fmt.Sprintf("%s is %s faster alone but %s slower beside the loops", v.Arm,
				Percent(1-v.Alone.Median), Percent(v.Contended.Median-1)))
		case !v.Excluded && !a.Decided:
			open = append(open, v.Arm)
		}
	}
	s := ""
	if len(trades) > 0 {
		s += "; " + strings.Join(trades, "; ")
	}
	if len(open) > 0 {
		s += fmt.Sprintf("; still open: %s (--max-reps or --max-time for more)", strings.Join(open, ", "))
	}
	return s
}

// phrase says how a way stands in one setting: "31% faster beside a busy
// loop on its CPU [24%, 38%]" (faster: that much less time per step), or
// "the same alone (±2%)".
func phrase(s Standing, p *Paired, noise float64, where string) string {
	if s == Better {
		return fmt.Sprintf("%s faster %s [%s, %s]", Percent(1-p.Median), where, Percent(1-p.CI[1]), Percent(1-p.CI[0]))
	}
	return fmt.Sprintf("the same %s (±%s)", where, Percent(noise))
}

// Percent formats a fraction as a percentage: whole percents from 10%,
// one decimal below.
func Percent(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "?%"
	}
	if math.Abs(f) >= 0.095 {
		return fmt.Sprintf("%.0f%%", 100*f)
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}
