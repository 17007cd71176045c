package decide

import (
	"fmt"
	"math"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Where names a setting as the line says it: "alone", "beside a busy
// loop on each of its 2 CPUs", "... coming and going (1s on, 1s off)".
func Where(setting string) string {
	rest, pattern := apptable.SplitPattern(setting)
	base, cpus := apptable.Setting(rest)
	if base == "none" {
		return "alone"
	}
	n := "a busy loop on its CPU"
	if cpus > 1 {
		n = fmt.Sprintf("a busy loop on each of its %d CPUs", cpus)
	}
	switch pattern {
	case "", "start":
		return "beside " + n
	case "late":
		return "beside " + n + " started after its ready line"
	}
	return fmt.Sprintf("beside %s coming and going (%s on, %s off)", n, pattern, pattern)
}

// repsWords is "1 repetition", "4 repetitions".
func repsWords(n int) string {
	if n == 1 {
		return "1 repetition"
	}
	return fmt.Sprintf("%d repetitions", n)
}

// Line is the one recommendation line: how to run the program (runWith
// by arm: the command line in that way), by how much it gains in each
// setting with the interval, or that no way is measurably better, with
// each setting's noise and what stands in the way; reps is how many
// repetitions ran.
func (a *Advice) Line(runWith map[string]string, reps int) string {
	w := a.Way(a.Arm)
	if w == nil {
		var noise []string
		for _, n := range a.Noise {
			noise = append(noise, fmt.Sprintf("±%s %s", Percent(n.Noise), Where(n.Setting)))
		}
		return fmt.Sprintf("No way is measurably better here than as it is (noise %s; %s%s)",
			strings.Join(noise, ", "), repsWords(reps), a.why())
	}
	var better, same []string
	for i, j := range w.In {
		p := phrase(j, a.Noise[i].Noise)
		if j.Is == Better {
			better = append(better, p)
		} else {
			same = append(same, p)
		}
	}
	better[0] = strings.Replace(better[0], "faster", "faster than as it is", 1)
	return fmt.Sprintf("Run it %s: %s (%s)", runWith[w.Arm], strings.Join(append(better, same...), ", "), repsWords(reps))
}

// why says what kept each near way from being recommended: a trade
// (better in one setting, worse in another) and the ways still open.
func (a *Advice) why() string {
	var trades, open []string
	for _, v := range a.Ways {
		var better, worse []string
		for _, j := range v.In {
			switch j.Is {
			case Better:
				better = append(better, fmt.Sprintf("%s faster %s", Percent(1-j.Paired.Median), Where(j.Setting)))
			case Worse:
				worse = append(worse, fmt.Sprintf("%s slower %s", Percent(j.Paired.Median-1), Where(j.Setting)))
			}
		}
		switch {
		case v.Failed != "":
		case len(better) > 0 && len(worse) > 0:
			trades = append(trades, fmt.Sprintf("%s is %s but %s", v.Arm, strings.Join(better, ", "), strings.Join(worse, ", ")))
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
func phrase(j Judged, noise float64) string {
	if j.Is == Better {
		p := j.Paired
		return fmt.Sprintf("%s faster %s [%s, %s]", Percent(1-p.Median), Where(j.Setting), Percent(1-p.CI[1]), Percent(1-p.CI[0]))
	}
	return fmt.Sprintf("the same %s (±%s)", Where(j.Setting), Percent(noise))
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
