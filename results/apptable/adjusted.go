package apptable

import (
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Adjusted is an arm compared with cuda-default at the same CPU speed.
//
// Step times of separate processes can differ by far more than any wait
// policy changes them (docs/gromacs.md: one mdrun against the next with
// the same input, on a GPU machine that is itself a VM), every CPU-side
// activity slower by one factor for the process's life. A
// program that reports CPU-side work with no wait inside it (Run.HostS)
// gauges that speed, and over every run of a program and setting
//
//	log(wall per step) = arm's level + Slope * log(host_s per step)
//
// (one slope shared by the arms) gives each arm's level: its step time at
// one CPU speed. HostUS shows whether an arm slowed the CPU-side work
// itself (its cache, its threads), which the adjustment would hide.
type Adjusted struct {
	Program    string  `json:"program"`
	Contention string  `json:"contention"`
	Arm        string  `json:"arm"`
	N          int     `json:"n"`
	StepUS     float64 `json:"step_us"` // median, unadjusted
	HostUS     float64 `json:"host_us"` // median host_s per step
	Slope      float64 `json:"slope"`
	// VsDefault is the arm's level over cuda-default's, with the 95%
	// interval of resampling the repetitions (a repetition keeps its
	// arms together).
	VsDefault float64    `json:"vs_default"`
	CI        [2]float64 `json:"ci"`
}

// AdjustedNote says what PrintAdjusted's table is.
const AdjustedNote = "for CPU speed: each arm's time per step over cuda-default's at the same CPU speed, gauged by the program's CPU-side work per step with no wait in it (host_s): log(step) = arm's level + slope x log(host_s per step), one slope for the arms; 95% interval from resampling the repetitions"

// adjustResamples and adjustSeed fix the resampling, so that one input
// gives one answer.
const (
	adjustResamples = 2000
	adjustSeed      = 1
)

// point is one run's logs of wall and host seconds per step.
type point struct{ y, x float64 }

// ForCPUSpeed compares the arms of every program and setting whose runs
// give host_s with cuda-default at the same CPU speed (Adjusted): cells
// where cuda-default and every other arm have at least 3 good runs of
// their own; in-process rounds, which share one process's speed, are
// left out.
func ForCPUSpeed(runs []Run) []Adjusted {
	type cell struct{ p, c string }
	reps := map[cell]map[int]map[string]point{}
	var order []cell
	for _, r := range runs {
		if !r.OK() || r.Round != 0 || r.HostS == nil || *r.HostS <= 0 || r.Steps <= 0 || r.WallS <= 0 {
			continue
		}
		k := cell{r.Program, r.Contention}
		if reps[k] == nil {
			reps[k] = map[int]map[string]point{}
			order = append(order, k)
		}
		if reps[k][r.Rep] == nil {
			reps[k][r.Rep] = map[string]point{}
		}
		n := float64(r.Steps)
		reps[k][r.Rep][r.Arm] = point{math.Log(r.WallS / n), math.Log(*r.HostS / n)}
	}
	var out []Adjusted
	for _, k := range order {
		out = append(out, compareAdjusted(k.p, k.c, reps[k])...)
	}
	return out
}

// compareAdjusted is ForCPUSpeed for one cell: its repetitions, each arm's
// point in it.
func compareAdjusted(program, contention string, reps map[int]map[string]point) []Adjusted {
	keys := slices.Sorted(maps.Keys(reps))
	armSet := map[string]bool{}
	for _, r := range keys {
		for a := range reps[r] {
			armSet[a] = true
		}
	}
	arms := slices.Sorted(maps.Keys(armSet))
	if !slices.Contains(arms, "cuda-default") || slices.ContainsFunc(arms, func(a string) bool { return runsOf(reps, keys, a) < 3 }) {
		return nil
	}
	slope, level := fitLevels(reps, keys, arms)
	rng := rand.New(rand.NewPCG(adjustSeed, 0))
	draws := map[string][]float64{}
	sample := make([]int, len(keys))
	for range adjustResamples {
		for i := range sample {
			sample[i] = keys[rng.IntN(len(keys))]
		}
		if slices.ContainsFunc(arms, func(a string) bool { return runsOf(reps, sample, a) < 2 }) {
			continue
		}
		_, lv := fitLevels(reps, sample, arms)
		for _, a := range arms {
			draws[a] = append(draws[a], math.Exp(lv[a]-lv["cuda-default"]))
		}
	}
	var out []Adjusted
	for _, a := range arms {
		var steps, hosts []float64
		for _, r := range keys {
			if p, ok := reps[r][a]; ok {
				steps = append(steps, math.Exp(p.y)*1e6)
				hosts = append(hosts, math.Exp(p.x)*1e6)
			}
		}
		adj := Adjusted{Program: program, Contention: contention, Arm: a, N: len(steps),
			StepUS: stats.Median(steps), HostUS: stats.Median(hosts), Slope: slope,
			VsDefault: math.Exp(level[a] - level["cuda-default"])}
		if d := draws[a]; len(d) > 0 {
			slices.Sort(d)
			adj.CI = [2]float64{d[int(0.025*float64(len(d)))], d[int(0.975*float64(len(d)))-1]}
		}
		out = append(out, adj)
	}
	return out
}

// runsOf counts the repetitions of sample (with repeats) in which arm ran.
func runsOf(reps map[int]map[string]point, sample []int, arm string) int {
	n := 0
	for _, r := range sample {
		if _, ok := reps[r][arm]; ok {
			n++
		}
	}
	return n
}

// fitLevels fits the shared slope by least squares within each arm and
// returns it with each arm's level at the mean host time of sample.
func fitLevels(reps map[int]map[string]point, sample []int, arms []string) (float64, map[string]float64) {
	byArm := map[string][]point{}
	var all []point
	for _, r := range sample {
		for _, a := range arms {
			if p, ok := reps[r][a]; ok {
				byArm[a] = append(byArm[a], p)
				all = append(all, p)
			}
		}
	}
	var sxy, sxx float64
	for _, pts := range byArm {
		my, mx := meanOf(pts)
		for _, p := range pts {
			sxy += (p.y - my) * (p.x - mx)
			sxx += (p.x - mx) * (p.x - mx)
		}
	}
	slope := 0.0
	if sxx > 0 {
		slope = sxy / sxx
	}
	_, xbar := meanOf(all)
	level := map[string]float64{}
	for a, pts := range byArm {
		s := 0.0
		for _, p := range pts {
			s += p.y - slope*(p.x-xbar)
		}
		level[a] = s / float64(len(pts))
	}
	return slope, level
}

func meanOf(pts []point) (y, x float64) {
	for _, p := range pts {
		y += p.y
		x += p.x
	}
	return y / float64(len(pts)), x / float64(len(pts))
}

// PrintAdjusted writes ForCPUSpeed's comparisons as a table, nothing for
// none.
func PrintAdjusted(w io.Writer, adj []Adjusted) error {
	head, cells := AdjustedColumns(adj)
	return printColumns(w, head, cells)
}

// AdjustedColumns returns PrintAdjusted's table as text: the header and a
// row of cells per comparison (report's HTML draws the same).
func AdjustedColumns(adj []Adjusted) (head []string, cells [][]string) {
	if len(adj) == 0 {
		return nil, nil
	}
	head = []string{"program", "contention", "arm", "n", "µs/step", "host µs/step", "slope", "vs default for CPU speed [95%]"}
	for _, a := range adj {
		cells = append(cells, []string{a.Program, a.Contention, a.Arm, fmt.Sprint(a.N),
			fmt.Sprintf("%.1f", a.StepUS), fmt.Sprintf("%.1f", a.HostUS), fmt.Sprintf("%.2f", a.Slope),
			fmt.Sprintf("%+.1f%% [%+.1f,%+.1f]", (a.VsDefault-1)*100, (a.CI[0]-1)*100, (a.CI[1]-1)*100)})
	}
	return head, cells
}
