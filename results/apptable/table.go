package apptable

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Run is one run of one program in one arm under one contention setting:
// a row of runs.jsonl.
type Run struct {
	Program    string `json:"program"`
	Arm        string `json:"arm"`
	Contention string `json:"contention"`
	Rep        int    `json:"rep"`
	// Round, from 1, of a program that compares the arms inside one
	// process (Program.InProcess); 0 for a run of its own.
	Round int     `json:"round,omitempty"`
	Order int     `json:"order"` // position among the arms of its cell, from 0
	Steps int     `json:"steps"`
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
	// Timed: the program printed no result line, so WallS is its process's
	// time from exec to exit and CPUS its process tree's CPU time (its own,
	// its reaped children's and that of what it left running).
	Timed bool `json:"timed,omitempty"`
	// RusageCPUS is the whole process's CPU time, warm-up included.
	RusageCPUS float64 `json:"rusage_cpu_s"`
	ExitStatus int     `json:"exit_status"`
	Error      string  `json:"error,omitempty"`
	Stats      string  `json:"stats,omitempty"`
	Start      string  `json:"start"`
	// Agent is the agent's setting during the run (apps --with-agent,
	// Agent.String); "" none.
	Agent string `json:"agent,omitempty"`
	// SliceNs is the program's EEVDF slice in an in-process round, as
	// the program read it (Round.SliceNs).
	SliceNs uint64 `json:"slice_ns,omitempty"`
	// CPUBusyS is how long the program's CPU was busy in an in-process
	// round, its own CPU time included (Round.CPUBusyS).
	CPUBusyS *float64 `json:"cpu_busy_s,omitempty"`
	// CoRunnersShare is the busy loops' share of their CPUs over the
	// run, where the script that ran it measured them
	// (experiments/apps/diag/gromacs-omp.sh).
	CoRunnersShare *float64 `json:"corunners_share,omitempty"`
	// ContendAtStart: the setting was in place from the program's start,
	// not from its ready line (Config.ContendAtStart).
	ContendAtStart bool `json:"contend_at_start,omitempty"`
	// OnCPUs are the CPUs a run under a setting on several CPUs
	// (nonexN, while1xN, ...) ran on; absent on one, --cpu.
	OnCPUs []int `json:"on_cpus,omitempty"`
	// HostS is the program's own measure of CPU-side work in its window
	// (gromacs.py: mdrun's work with no wait inside it), when it gives one: a
	// gauge of how fast its CPU ran, for comparisons adjusted for it
	// (ForCPUSpeed).
	HostS *float64 `json:"host_s,omitempty"`
}

// othersShare is the share of the run's wall time that its CPU spent on
// others' work (the co-runner's), and whether it was measured.
func (r Run) othersShare() (float64, bool) {
	if r.CoRunnersShare != nil {
		return *r.CoRunnersShare, true
	}
	if r.CPUBusyS == nil || r.WallS <= 0 {
		return 0, false
	}
	return max(0, *r.CPUBusyS-r.CPUS) / r.WallS, true
}

// OK reports whether the run counts in the medians.
func (r Run) OK() bool { return r.Error == "" }

// PerStep is the run's wall time per step, the measure arms are compared
// by: a program run for --seconds does as many steps as fit, so its wall
// time is about the same in every arm. A program that reports no steps is
// compared by its wall time.
func (r Run) PerStep() float64 {
	if r.Steps > 0 {
		return r.WallS / float64(r.Steps)
	}
	return r.WallS
}

// ArmResult is one arm of a row: medians over its good runs.
type ArmResult struct {
	Arm    string  `json:"arm"`
	Runs   int     `json:"runs"`
	Failed int     `json:"failed"`
	WallS  float64 `json:"wall_s"`
	CPUS   float64 `json:"cpu_s"`
	Steps  int     `json:"steps"`
	// Medians of wall and CPU time per step (per run where steps are
	// not reported).
	StepUS    float64 `json:"step_us"`
	CPUStepUS float64 `json:"cpu_step_us"`
	// Ratios of the wall time per step to the program's fastest arm
	// alone (results/compare's slowdown); absent when nothing was
	// measured alone.
	Ratio    *float64 `json:"ratio,omitempty"`
	RatioMin *float64 `json:"ratio_min,omitempty"`
	RatioMax *float64 `json:"ratio_max,omitempty"`
	// VsLimit is the wall time per step over the program's Limit, under
	// a contention setting (absent alone, or without a limit).
	VsLimit *float64 `json:"vs_limit,omitempty"`
	// OthersCPUShare is the median share of the wall time its CPU gave
	// to others (the co-runner): what the arm leaves its neighbour.
	// Absent where the runs did not measure it (Run.CPUBusyS).
	OthersCPUShare *float64 `json:"others_cpu_share,omitempty"`
}

// Limit is the best time per step a program can reach with one
// CPU-bound co-runner on its CPU under a fair scheduler
// (docs/experiments.md): its time alone T while its CPU demand with
// blocking waits C fits in the co-runner's absences (C <= T/2), else
// the fair-share bound 2C; that is, the larger of the two. T is the
// fastest arm's median time per step alone, C the cuda-blocking arm's
// median CPU per step alone (CUDA's spin only adds CPU to the same
// work), so no arm can beat either. The cap settings at the default
// --cap-quota, half of --cap-period, leave the program the same half
// CPU. On N CPUs, each with its busy loop, C is the CPU per step over
// the N CPUs (the CPU seconds / N): a fair scheduler gives the program
// half of each, N/2 CPUs in all, as long as it has no more runnable
// threads than CPUs.
type Limit struct {
	TUS    float64 `json:"t_us"`
	TwoCUS float64 `json:"two_c_us"`
	Bound  string  `json:"bound"` // "T" or "2C": the one that applies
	US     float64 `json:"us"`
	// CPUs the program ran on (C is over them); absent for one.
	CPUs int `json:"cpus,omitempty"`
}

// limitOf returns the limit from the arms' time per step alone (by arm,
// the measured ones) and the cuda-blocking arm's CPU per step alone, on
// cpus CPUs; nil without both.
func limitOf(alone map[string]float64, blockingCPU float64, cpus int) *Limit {
	t := math.Inf(1)
	for _, w := range alone {
		t = min(t, w)
	}
	if math.IsInf(t, 1) || blockingCPU <= 0 {
		return nil
	}
	cpus = max(cpus, 1)
	l := &Limit{TUS: t * 1e6, TwoCUS: 2 * blockingCPU / float64(cpus) * 1e6, Bound: "T"}
	if cpus > 1 {
		l.CPUs = cpus
	}
	l.US = l.TUS
	if l.TwoCUS > l.TUS {
		l.Bound, l.US = "2C", l.TwoCUS
	}
	return l
}

// Paired is a median over repetitions of one ratio, with a confidence
// interval for it that assumes nothing of the distribution (stats.MedianCI), the
// interval's level, and the number of repetitions.
type Paired struct {
	Median float64    `json:"median"`
	CI     [2]float64 `json:"ci"`
	Level  float64    `json:"level"`
	N      int        `json:"n"`
}

// Row is one program under one contention setting.
type Row struct {
	Program    string      `json:"program"`
	Contention string      `json:"contention"`
	Arms       []ArmResult `json:"arms"`
	Best       string      `json:"best,omitempty"`
	// With hybridsync and a CUDA arm measured: hybridsync's median wall
	// time over the better CUDA arm's and over cuda-default's, and
	// whether it meets the targets (within 3% of the better CUDA arm,
	// not slower than cuda-default).
	HSVsBestCUDA *float64 `json:"hybridsync_vs_best_cuda,omitempty"`
	HSVsDefault  *float64 `json:"hybridsync_vs_default,omitempty"`
	HSWithin3Pct *bool    `json:"hybridsync_within_3pct,omitempty"`
	HSNotSlower  *bool    `json:"hybridsync_not_slower,omitempty"`
	// The same comparison by repetition: the arms of one repetition run
	// back to back, so the ratio of two of them leaves out most of the
	// drift between repetitions (the same cell can vary by 1.6x on a
	// noisy machine). Medians over repetitions of hybridsync's time over
	// cuda-default's and over cuda-blocking's; vs the better CUDA arm is
	// the larger of the two.
	HSVsBestCUDAPaired *Paired `json:"hybridsync_vs_best_cuda_paired,omitempty"`
	HSVsDefaultPaired  *Paired `json:"hybridsync_vs_default_paired,omitempty"`
	// AAPaired is cuda-default-again's time over cuda-default's, paired
	// like the others: with both measured, the spread that two runs of
	// one arm show, against which the library's ratios are read.
	AAPaired *Paired `json:"aa_paired,omitempty"`
	// VsDefaultPaired is the time over cuda-default's, paired, of each
	// of the arms of pairedWithDefault that ran (the OpenMP settings, the
	// launcher, the linked build), by arm.
	VsDefaultPaired map[string]*Paired `json:"vs_default_paired,omitempty"`
	// Verdict on the targets: from the paired intervals where there are
	// any ("met", "MISSED: ...", or "open: ..." where the interval
	// straddles the bound), else from the medians.
	Verdict string `json:"verdict,omitempty"`
	// Limit is the program's (the same in all its rows); nil unless its
	// cuda-blocking arm was measured alone.
	Limit *Limit `json:"limit,omitempty"`
}

// pairedWithDefault reports whether a row gives arm's paired ratio to
// cuda-default in Row.VsDefaultPaired: every arm but the two CUDA modes
// and the A/A arm, which have columns of their own, and hybridsync,
// which is compared with both CUDA modes.
func pairedWithDefault(arm string) bool {
	switch arm {
	case "cuda-default", "cuda-blocking", "cuda-default-again", "hybridsync":
		return false
	}
	return true
}

// Summarize computes the table from runs, rows in the order of programs
// and contentions, arms in the order of arms. A program and setting that
// no run has (files of different cells taken together by --from) has no
// row. The reference of a setting on N CPUs is the program alone on as
// many (none, nonexN).
func Summarize(runs []Run, programs, contentions, arms []string) []Row {
	type key struct{ p, c, a string }
	by := map[key][]Run{}
	cells := map[key]bool{}
	for _, r := range runs {
		k := key{r.Program, r.Contention, r.Arm}
		by[k] = append(by[k], r)
		cells[key{r.Program, r.Contention, ""}] = true
	}
	type ref struct {
		p    string
		cpus int
	}
	base := map[ref]float64{}
	limits := map[ref]*Limit{}
	for _, p := range programs {
		for _, c := range contentions {
			n := SettingCPUs(c)
			rk, none := ref{p, n}, AloneOn(n)
			if _, done := limits[rk]; done {
				continue
			}
			// The reference is results/compare's: the fastest arm alone.
			alone := map[string]float64{}
			for _, a := range arms {
				if w, _ := perStepMedians(by[key{p, none, a}]); w > 0 {
					alone[a] = w
					if base[rk] == 0 || w < base[rk] {
						base[rk] = w
					}
				}
			}
			_, blockingCPU := perStepMedians(by[key{p, none, "cuda-blocking"}])
			limits[rk] = limitOf(alone, blockingCPU, n)
		}
	}
	var rows []Row
	for _, p := range programs {
		for _, c := range contentions {
			if !cells[key{p, c, ""}] {
				continue
			}
			rk := ref{p, SettingCPUs(c)}
			row := Row{Program: p, Contention: c, Limit: limits[rk]}
			wall := map[string]float64{}
			for _, a := range arms {
				rs := by[key{p, c, a}]
				ar := ArmResult{Arm: a}
				var walls []float64
				for _, r := range rs {
					if r.OK() {
						ar.Runs++
						walls = append(walls, r.PerStep())
					} else {
						ar.Failed++
					}
				}
				ar.WallS, ar.CPUS = medians(rs)
				ar.OthersCPUShare = medianOthersShare(rs)
				ar.Steps = medianSteps(rs)
				step, cpuStep := perStepMedians(rs)
				ar.StepUS, ar.CPUStepUS = step*1e6, cpuStep*1e6
				if b := base[rk]; b > 0 && ar.Runs > 0 {
					lo, hi := stats.MinMax(walls)
					ar.Ratio, ar.RatioMin, ar.RatioMax = ptr(step/b), ptr(lo/b), ptr(hi/b)
				}
				if l := limits[rk]; l != nil && !Alone(c) && ar.Runs > 0 {
					ar.VsLimit = ptr(step * 1e6 / l.US)
				}
				if ar.Runs > 0 {
					if row.Best == "" || step < wall[row.Best] {
						row.Best = a
					}
					wall[a] = step
				}
				row.Arms = append(row.Arms, ar)
			}
			if hs, ok := wall["hybridsync"]; ok {
				bestCUDA := math.Inf(1)
				for _, a := range []string{"cuda-default", "cuda-blocking"} {
					if w, ok := wall[a]; ok && w < bestCUDA {
						bestCUDA = w
					}
				}
				if !math.IsInf(bestCUDA, 1) {
					row.HSVsBestCUDA = ptr(hs / bestCUDA)
					row.HSWithin3Pct = ptr(hs <= 1.03*bestCUDA)
				}
				if d, ok := wall["cuda-default"]; ok {
					row.HSVsDefault = ptr(hs / d)
					row.HSNotSlower = ptr(hs <= d)
				}
				row.setPaired(Pair(by[key{p, c, "hybridsync"}], by[key{p, c, "cuda-default"}]),
					Pair(by[key{p, c, "hybridsync"}], by[key{p, c, "cuda-blocking"}]))
			}
			if slices.Contains(arms, "cuda-default-again") {
				row.AAPaired = Pair(by[key{p, c, "cuda-default-again"}], by[key{p, c, "cuda-default"}])
			}
			for _, a := range arms {
				if !pairedWithDefault(a) {
					continue
				}
				if pr := Pair(by[key{p, c, a}], by[key{p, c, "cuda-default"}]); pr != nil {
					if row.VsDefaultPaired == nil {
						row.VsDefaultPaired = map[string]*Paired{}
					}
					row.VsDefaultPaired[a] = pr
				}
			}
			row.Verdict = verdict(row)
			rows = append(rows, row)
		}
	}
	return rows
}

func ptr[T any](v T) *T { return &v }

// Pair returns the median of one arm's time per step (hybridsync's,
// or the A/A arm's) over the other arm's, by repetition, and within one
// by round (nil when none has good runs of both).
func Pair(hs, other []Run) *Paired {
	type pair struct{ rep, round int }
	byRep := map[pair]float64{}
	for _, r := range other {
		if r.OK() {
			byRep[pair{r.Rep, r.Round}] = r.PerStep()
		}
	}
	var rs []float64
	for _, r := range hs {
		if o, ok := byRep[pair{r.Rep, r.Round}]; ok && r.OK() && o > 0 {
			rs = append(rs, r.PerStep()/o)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	lo, hi, level := stats.MedianCI(rs)
	return &Paired{Median: stats.Median(rs), CI: [2]float64{lo, hi}, Level: level, N: len(rs)}
}

// setPaired fills the row's paired fields from hybridsync over default
// and over blocking. Over the better CUDA arm is the larger of the two
// medians; its interval, the larger of the bounds, holds whenever both
// intervals do, so its level is at least the sum of theirs less one.
func (row *Row) setPaired(def, blk *Paired) {
	row.HSVsDefaultPaired = def
	switch {
	case def == nil:
		row.HSVsBestCUDAPaired = blk
	case blk == nil:
		row.HSVsBestCUDAPaired = def
	default:
		row.HSVsBestCUDAPaired = &Paired{Median: math.Max(def.Median, blk.Median),
			CI:    [2]float64{math.Max(def.CI[0], blk.CI[0]), math.Max(def.CI[1], blk.CI[1])},
			Level: math.Max(0, def.Level+blk.Level-1), N: min(def.N, blk.N)}
	}
}

// medians returns the median wall and CPU seconds of the good runs in rs
// (0 when there are none).
func medians(rs []Run) (wall, cpu float64) {
	var w, c []float64
	for _, r := range rs {
		if r.OK() {
			w = append(w, r.WallS)
			c = append(c, r.CPUS)
		}
	}
	return stats.Median(w), stats.Median(c)
}

// perStepMedians returns the median wall and CPU time per step of the
// good runs in rs.
func perStepMedians(rs []Run) (wall, cpu float64) {
	var w, c []float64
	for _, r := range rs {
		if r.OK() {
			w = append(w, r.PerStep())
			c = append(c, r.CPUS*r.PerStep()/r.WallS)
		}
	}
	return stats.Median(w), stats.Median(c)
}

// medianOthersShare is the median of the good runs' Run.othersShare, nil
// where none measured it.
func medianOthersShare(rs []Run) *float64 {
	var v []float64
	for _, r := range rs {
		if s, ok := r.othersShare(); ok && r.OK() {
			v = append(v, s)
		}
	}
	if len(v) == 0 {
		return nil
	}
	return ptr(stats.Median(v))
}

func medianSteps(rs []Run) int {
	var s []float64
	for _, r := range rs {
		if r.OK() {
			s = append(s, float64(r.Steps))
		}
	}
	return int(math.Round(stats.Median(s)))
}

// PrintTable writes rows as one table: per arm, the ratio of wall time
// per step to the program's fastest arm alone with [min-max] (or the
// median wall time per step when nothing was measured alone) and the
// median CPU seconds; then the comparisons, the target, the program's
// limit (which bound applies, T and 2C) and, under contention, each
// arm's time per step over it; last the failed runs.
func PrintTable(w io.Writer, rows []Row) error {
	head, cells := Columns(rows)
	return printColumns(w, head, cells)
}

// printColumns writes a table of text cells aligned in columns, nothing
// for no header.
func printColumns(w io.Writer, head []string, cells [][]string) error {
	if len(head) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, cols := range cells {
		fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	}
	return tw.Flush()
}

// Columns returns PrintTable's table as text: the header and a row of
// cells per row (report's HTML draws the same); nothing for no rows.
func Columns(rows []Row) (head []string, cells [][]string) {
	if len(rows) == 0 {
		return nil, nil
	}
	has := measured(rows)
	head = []string{"program", "contention"}
	for _, a := range rows[0].Arms {
		head = append(head, a.Arm+" wall", "cpu s")
	}
	head = append(head, "best")
	if has.hs {
		head = append(head, "hybridsync vs best CUDA", "vs default", "paired [CI]", "n (level)", "target")
	}
	if has.aa {
		head = append(head, "A/A paired [CI]")
	}
	if has.others {
		head = append(head, "vs default paired [CI]")
	}
	if has.limit {
		head = append(head, "limit", "arms / limit")
	}
	if has.share {
		head = append(head, "co-runner CPU")
	}
	head = append(head, "failed")
	for _, r := range rows {
		cells = append(cells, rowColumns(r, has))
	}
	return head, cells
}

// columnsOf says which of the optional columns some row measured: a
// column no row has is left out.
type columnsOf struct{ hs, aa, others, limit, share bool }

func measured(rows []Row) columnsOf {
	return columnsOf{
		hs:     slices.ContainsFunc(rows, func(r Row) bool { return r.HSVsDefault != nil || r.HSVsBestCUDA != nil }),
		aa:     slices.ContainsFunc(rows, func(r Row) bool { return r.AAPaired != nil }),
		others: slices.ContainsFunc(rows, func(r Row) bool { return len(r.VsDefaultPaired) > 0 }),
		limit:  slices.ContainsFunc(rows, func(r Row) bool { return r.Limit != nil }),
		share: slices.ContainsFunc(rows, func(r Row) bool {
			return slices.ContainsFunc(r.Arms, func(a ArmResult) bool { return a.OthersCPUShare != nil })
		}),
	}
}

// rowColumns is one row's cells under Columns' head.
func rowColumns(r Row, has columnsOf) []string {
	cols := []string{r.Program, r.Contention}
	failed := 0
	for _, a := range r.Arms {
		failed += a.Failed
		switch {
		case a.Runs == 0:
			cols = append(cols, "-", "-")
			continue
		case a.Ratio != nil:
			cols = append(cols, fmt.Sprintf("%.2f [%.2f-%.2f]", *a.Ratio, *a.RatioMin, *a.RatioMax))
		default:
			cols = append(cols, fmt.Sprintf("%.1f µs/step", a.StepUS))
		}
		cols = append(cols, fmt.Sprintf("%.3f", a.CPUS))
	}
	cols = append(cols, orDash(r.Best))
	if has.hs {
		cols = append(cols, pct(r.HSVsBestCUDA), pct(r.HSVsDefault),
			pairedPct(r.HSVsBestCUDAPaired)+" / "+pairedPct(r.HSVsDefaultPaired),
			pairedN(r.HSVsBestCUDAPaired), orDash(r.Verdict))
	}
	if has.aa {
		cols = append(cols, pairedPct(r.AAPaired))
	}
	if has.others {
		cols = append(cols, vsDefaultCol(r))
	}
	if has.limit {
		cols = append(cols, limitCol(r.Limit), vsLimitCol(r))
	}
	if has.share {
		cols = append(cols, othersCol(r))
	}
	return append(cols, fmt.Sprint(failed))
}

// pairWords is T and 2C in the unit that suits the larger: a step's in
// µs, a program's timed whole (no result line) in ms or s.
func pairWords(t, twoC float64) string {
	unit, div, format := "µs", 1.0, "%.1f"
	switch m := max(t, twoC); {
	case m >= 1e6:
		unit, div, format = "s", 1e6, "%.2f"
	case m >= 1e4:
		unit, div = "ms", 1e3
	}
	return fmt.Sprintf("T "+format+" / 2C "+format+" %s", t/div, twoC/div, unit)
}

// limitCol is the limit: the bound that applies, then T and 2C, and on
// several CPUs how many C is over.
func limitCol(l *Limit) string {
	if l == nil {
		return "-"
	}
	s := fmt.Sprintf("%s: %s", l.Bound, pairWords(l.TUS, l.TwoCUS))
	if l.CPUs > 1 {
		s += fmt.Sprintf(" (C over %d CPUs)", l.CPUs)
	}
	return s
}

// vsDefaultCol is each of the row's VsDefaultPaired, in the arms'
// order: "omp-passive -12.0% [-15.1,-9.0]; ...".
func vsDefaultCol(r Row) string {
	var v []string
	for _, a := range r.Arms {
		if p := r.VsDefaultPaired[a.Arm]; p != nil {
			v = append(v, a.Arm+" "+pairedPct(p))
		}
	}
	if len(v) == 0 {
		return "-"
	}
	return strings.Join(v, "; ")
}

// othersCol is each arm's OthersCPUShare, in the arms' order ("-" where
// none was measured, alone it is the machine's background).
func othersCol(r Row) string {
	if Alone(r.Contention) || !slices.ContainsFunc(r.Arms, func(a ArmResult) bool { return a.OthersCPUShare != nil }) {
		return "-"
	}
	var v []string
	for _, a := range r.Arms {
		if a.OthersCPUShare == nil {
			v = append(v, "-")
		} else {
			v = append(v, fmt.Sprintf("%.0f%%", *a.OthersCPUShare*100))
		}
	}
	return strings.Join(v, " / ")
}

// vsLimitCol is each arm's time over the limit, in the arms' order.
func vsLimitCol(r Row) string {
	var vs []string
	for _, a := range r.Arms {
		if a.VsLimit == nil {
			vs = append(vs, "-")
		} else {
			vs = append(vs, fmt.Sprintf("%.2f", *a.VsLimit))
		}
	}
	if !slices.ContainsFunc(r.Arms, func(a ArmResult) bool { return a.VsLimit != nil }) {
		return "-"
	}
	return strings.Join(vs, " / ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// pairedPct is a paired median as pct, with its interval in brackets.
func pairedPct(p *Paired) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%s [%+.1f,%+.1f]", pct(&p.Median), (p.CI[0]-1)*100, (p.CI[1]-1)*100)
}

func pairedN(p *Paired) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%d (%.0f%%)", p.N, p.Level*100)
}

func pct(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", (*r-1)*100)
}

// minVerdictLevel: an interval of a lower level (too few repetitions)
// decides nothing. Five repetitions reach it over the better CUDA arm
// (the bound of two intervals at 94% each, [min, max], is at 88%).
const minVerdictLevel = 0.85

// verdict says whether hybridsync meets the targets in this row: alone,
// within 2% of cuda-default; under contention, within 3% of the better
// CUDA arm and not slower than cuda-default. With paired
// repetitions each target is "met" when the whole interval is on its good
// side, missed when all of it is on the bad side, and open otherwise or
// when the interval's level is below minVerdictLevel;
// without them the medians decide.
func verdict(r Row) string {
	type check struct {
		paired *Paired
		point  *bool
		bound  float64
		name   string
	}
	checks := []check{
		{r.HSVsBestCUDAPaired, r.HSWithin3Pct, 1.03, ">3% behind the better CUDA mode"},
		{r.HSVsDefaultPaired, r.HSNotSlower, 1, "slower than default"},
	}
	if Alone(r.Contention) {
		var within *bool
		if r.HSVsDefault != nil {
			within = ptr(*r.HSVsDefault <= 1.02)
		}
		checks = []check{{r.HSVsDefaultPaired, within, 1.02, ">2% behind default"}}
	}
	var missed, open []string
	measured := false
	for _, c := range checks {
		switch {
		case c.paired != nil:
			measured = true
			switch {
			case c.paired.Level < minVerdictLevel || (c.paired.CI[0] <= c.bound && c.paired.CI[1] > c.bound):
				open = append(open, c.name)
			case c.paired.CI[0] > c.bound:
				missed = append(missed, c.name)
			}
		case c.point != nil:
			measured = true
			if !*c.point {
				missed = append(missed, c.name)
			}
		}
	}
	switch {
	case !measured:
		return ""
	case len(missed) > 0:
		return "MISSED: " + strings.Join(missed, ", ")
	case len(open) > 0:
		return "open: " + strings.Join(open, ", ")
	}
	return "met"
}
