// Package compare is the one definition of a cell's slowdown, which every
// table, report, plot and verdict shows: per vCPU count (and program), the
// reference is the fastest cell of the reference scenario (run's baseline,
// bench's and apps' none: results.ReferenceScenario) whatever its mode,
// and a cell's slowdown is its median time over that reference. Dividing
// each mode by its own baseline instead hides how far apart the modes are
// (their baselines differ by up to 1.7x), so a mode could read best in a
// row where it was slowest.
//
// It also draws the bottom line of a comparison: the best mode of each
// setting, its margin over the next, and whether the repetitions agree
// well enough for that margin to mean anything.
package compare

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/decide"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Cell is one measured cell: its key, its median time and the times of
// its repetitions.
type Cell struct {
	Key   results.Key
	WallS float64
	// Reps are the repetitions' times (the same measure as WallS), for
	// the spread; none is fine.
	Reps []float64
	// Times are the same by repetition, paired across the modes of a
	// row for decide.Fastest; nil ranks the cell by WallS alone.
	Times decide.Times
	// Waited and Spun count the waits of the cell's timeline that found
	// their kernel unfinished, and of those the ones the thread spent on
	// the CPU, whole or in part (results.Step.Wait); both 0 where the
	// timeline records no wait kinds.
	Waited, Spun int
}

// RefKey is what shares a reference: the vCPU count and the program.
type RefKey struct {
	Program string
	VCPUs   int
}

// Ref is the reference of one vCPU count and program: the fastest cell of
// the reference scenario.
type Ref struct {
	Mode  string
	WallS float64
}

// Entry is one cell as compared.
type Entry struct {
	WallS float64
	// VsRef is WallS over the reference of the cell's vCPU count; 0 when
	// that count has no cell of the reference scenario.
	VsRef float64
	// Fastest marks the mode with the least time in the cell's row.
	Fastest bool
	// MinS and MaxS are the fastest and slowest repetitions (0 without).
	MinS, MaxS float64
	// Waited, Spun: as Cell's.
	Waited, Spun int
}

// SpunShare is the share of the timeline's unfinished waits that spun,
// whole or in part; ok is false where the timeline recorded no wait kinds.
func (e Entry) SpunShare() (share float64, ok bool) {
	if e.Waited == 0 {
		return 0, false
	}
	return float64(e.Spun) / float64(e.Waited), true
}

// Spread is how far the slowest repetition is over the fastest (0.5:
// 50% slower); 0 without repetitions.
func (e Entry) Spread() float64 {
	if e.MinS <= 0 {
		return 0
	}
	return e.MaxS/e.MinS - 1
}

// Row is the cells that differ only in mode: one setting (scenario, vCPU
// count, co-runners, program, threshold).
type Row struct {
	Key   results.Key // Mode is ""
	Cells map[string]Entry
	// Best is the fastest mode, Next the second; Margin is Next's time
	// over Best's, less 1 (0.07: Best is 7% faster). Next is "" with one
	// mode. They are decide.Fastest's, the rule report's verdict and
	// advise decide by, whose Sign says whether the repetitions settle it.
	Best, Next string
	Margin     float64
	Sign       decide.Sign
}

// Noisy reports whether the repetitions of the row's two leading modes
// disagree by more than the margin that ranks them, and the larger
// spread and its mode. Where every repetition of the best mode beat every
// one of the next, the ranking holds however wide the spread: not noisy.
func (r Row) Noisy() (spread float64, mode string, noisy bool) {
	if r.Next == "" {
		return 0, "", false
	}
	for _, m := range []string{r.Best, r.Next} {
		if s := r.Cells[m].Spread(); s > spread {
			spread, mode = s, m
		}
	}
	best, next := r.Cells[r.Best], r.Cells[r.Next]
	return spread, mode, spread > r.Margin && best.MaxS >= next.MinS
}

// Table is the comparison of a set of cells.
type Table struct {
	// Reference is the scenario whose cells are the references.
	Reference string
	// PerStep: times are per step (results.Config.PerStep).
	PerStep bool
	Modes   []string       // in the order they first appear
	Rows    []Row          // by program and vCPU count, the reference first, then by scenario
	Refs    map[RefKey]Ref // by vCPU count and program
}

// FromFile compares f's cells: by median wall time, or where f says so
// (Config.PerStep) by median wall time per step.
func FromFile(f *results.File) Table {
	cs := make([]Cell, 0, len(f.Cells))
	for _, c := range f.Cells {
		cell := Cell{Key: c.Key, WallS: c.Median.WallS}
		if c.Timeline != nil {
			cell.Waited, cell.Spun = waitKinds(c.Timeline.Steps)
		}
		if f.Config.PerStep {
			cell.WallS = 0
		}
		for _, r := range c.Reps {
			cell.Reps = append(cell.Reps, measure(r, f.Config.PerStep))
		}
		cell.Times = RepTimes(c, f.Config.PerStep)
		if f.Config.PerStep {
			cell.WallS = stats.Median(cell.Reps)
			if len(cell.Reps) == 0 {
				cell.WallS = measure(c.Median, true)
			}
		}
		cs = append(cs, cell)
	}
	t := Build(cs, f.Reference())
	t.PerStep = f.Config.PerStep
	return t
}

// SetSlowdowns fills every cell's Slowdown of f from FromFile: what the
// commands that write results files call before writing.
func SetSlowdowns(f *results.File) {
	t := FromFile(f)
	for i := range f.Cells {
		f.Cells[i].Slowdown = t.Slowdown(f.Cells[i].Key)
	}
}

// waitKinds counts the steps whose wait found the kernel unfinished and,
// of those, the ones that spun whole or in part: the wait kinds
// experiments/paper/workload records (WaitSpin, WaitMixed, WaitBlock; WaitReady
// had nothing to wait for).
func waitKinds(steps []results.Step) (waited, spun int) {
	for _, s := range steps {
		switch s.Wait {
		case "spin", "mixed":
			waited++
			spun++
		case "block":
			waited++
		}
	}
	return waited, spun
}

// RepTimes are a cell's times by repetition: per step where perStep,
// numbered by Result.Rep where the writer numbered them, else by their
// place; a cell without repetitions by its median (an older file).
func RepTimes(c results.Cell, perStep bool) decide.Times {
	t := decide.Times{}
	reps := c.Reps
	if len(reps) == 0 {
		reps = []results.Result{c.Median}
	}
	for i, r := range reps {
		rep := i + 1
		if r.Rep > 0 {
			rep = r.Rep
		}
		if x := measure(r, perStep); x > 0 {
			t[rep] = x
		}
	}
	return t
}

// measure is a run's time as compared: its wall time, or per step.
func measure(r results.Result, perStep bool) float64 {
	if perStep && r.Steps > 0 {
		return r.WallS / float64(r.Steps)
	}
	return r.WallS
}

// Build compares cells against the cells of the scenario called
// reference. Cells without a time (0) are left out.
func Build(cells []Cell, reference string) Table {
	t := Table{Reference: reference, Refs: map[RefKey]Ref{}}
	index := map[results.Key]int{}
	times := map[results.Key]map[string]decide.Times{} // by row, by mode
	for _, c := range cells {
		if c.WallS <= 0 {
			continue
		}
		if !slices.Contains(t.Modes, c.Key.Mode) {
			t.Modes = append(t.Modes, c.Key.Mode)
		}
		if c.Key.Scenario == reference {
			rk := refKey(c.Key)
			if r, ok := t.Refs[rk]; !ok || c.WallS < r.WallS {
				t.Refs[rk] = Ref{Mode: c.Key.Mode, WallS: c.WallS}
			}
		}
		k := c.Key
		k.Mode = ""
		i, ok := index[k]
		if !ok {
			i = len(t.Rows)
			index[k] = i
			t.Rows = append(t.Rows, Row{Key: k, Cells: map[string]Entry{}})
		}
		e := Entry{WallS: c.WallS, Waited: c.Waited, Spun: c.Spun}
		for j, r := range c.Reps {
			if j == 0 || r < e.MinS {
				e.MinS = r
			}
			e.MaxS = max(e.MaxS, r)
		}
		t.Rows[i].Cells[c.Key.Mode] = e
		ct := c.Times
		if len(ct) == 0 {
			ct = decide.Times{1: c.WallS}
		}
		if times[k] == nil {
			times[k] = map[string]decide.Times{}
		}
		times[k][c.Key.Mode] = ct
	}
	for i := range t.Rows {
		r := &t.Rows[i]
		lead := decide.Fastest(times[r.Key])
		r.Best, r.Next, r.Margin, r.Sign = lead.Best, lead.Next, lead.Margin, lead.Sign
		for m, e := range r.Cells {
			if ref := t.Refs[refKey(r.Key)]; ref.WallS > 0 {
				e.VsRef = e.WallS / ref.WallS
			}
			e.Fastest = m == r.Best
			r.Cells[m] = e
		}
	}
	slices.SortStableFunc(t.Rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Key.Program, b.Key.Program), cmp.Compare(a.Key.VCPUs, b.Key.VCPUs), t.order(a.Key, b.Key))
	})
	return t
}

func refKey(k results.Key) RefKey { return RefKey{Program: k.Program, VCPUs: k.VCPUs} }

// Lookup returns the entry of the cell with key k.
func (t Table) Lookup(k results.Key) (Entry, bool) {
	mode := k.Mode
	k.Mode = ""
	for _, r := range t.Rows {
		if r.Key == k {
			e, ok := r.Cells[mode]
			return e, ok
		}
	}
	return Entry{}, false
}

// Slowdown is the slowdown of the cell with key k: its time over its
// reference's, 0 without one.
func (t Table) Slowdown(k results.Key) float64 {
	e, _ := t.Lookup(k)
	return e.VsRef
}

// order sorts a vCPU count's rows: the reference scenario first, then by
// scenario (shared1 before shared2, Table I's order), fewer co-runners
// first.
func (t Table) order(a, b results.Key) int {
	notRef := func(k results.Key) int {
		if k.Scenario == t.Reference {
			return 0
		}
		return 1
	}
	return cmp.Or(cmp.Compare(notRef(a), notRef(b)), cmp.Compare(a.Scenario, b.Scenario),
		cmp.Compare(a.Corunners, b.Corunners), cmp.Compare(a.Corunner, b.Corunner), cmp.Compare(a.Threshold, b.Threshold))
}

// String is the entry as tables show it: "0.391s 1.80x", with a * when it
// is its row's fastest mode; the time alone without a reference.
func (e Entry) String() string {
	s := Seconds(e.WallS)
	if e.VsRef > 0 {
		s += fmt.Sprintf(" %.2fx", e.VsRef)
	}
	if e.Fastest {
		s += "*"
	}
	return s
}

// Seconds prints a time in seconds, in µs or ms when it is short (a time
// per step).
func Seconds(s float64) string {
	switch {
	case s > 0 && s < 1e-3:
		return fmt.Sprintf("%.1fµs", s*1e6)
	case s > 0 && s < 0.1:
		return fmt.Sprintf("%.2fms", s*1e3)
	}
	return fmt.Sprintf("%.3fs", s)
}

// Definition says what a slowdown is in t, for every output that shows
// one.
func (t Table) Definition() string {
	what := "median wall time"
	if t.PerStep {
		what = "median wall time per step"
	}
	per := "vCPU count"
	if slices.ContainsFunc(t.Rows, func(r Row) bool { return r.Key.Program != "" }) {
		per = "program"
	}
	return fmt.Sprintf("slowdown = a cell's %s over its reference's, the fastest %s cell (any mode) of the same %s", what, t.Reference, per)
}

// References says what each vCPU count's cells are divided by, e.g.
// "2 vCPUs: yield 0.218s".
func (t Table) References() string {
	var parts []string
	seen := map[RefKey]bool{}
	for _, r := range t.Rows {
		rk := refKey(r.Key)
		if ref, ok := t.Refs[rk]; ok && !seen[rk] {
			seen[rk] = true
			name := Label(results.Key{Program: rk.Program, VCPUs: rk.VCPUs})
			parts = append(parts, fmt.Sprintf("%s: %s %s", name, ref.Mode, Seconds(ref.WallS)))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("none (no %s cells: times only)", t.Reference)
	}
	return strings.Join(parts, ", ")
}

// Label is the one name of a cell, or with its mode "" of a setting, that
// every output uses: run's table and conclusion, and every format of
// report (tables, plots, traces, verdicts). It is LabelParts
// joined by spaces: "shared1 2 vCPUs 1 x while1 hybrid".
func Label(k results.Key) string { return strings.Join(LabelParts(k), " ") }

// LabelParts are Label's words in groups, for outputs that break a name
// over lines: the program and scenario, the vCPU count (apps' programs
// name their CPUs in the scenario, e.g. while1x4), the co-runners where the
// scenario does not name them (bench's and apps' settings do), the mode
// and the threshold.
func LabelParts(k results.Key) []string {
	parts := []string{}
	if k.Program != "" {
		parts = append(parts, k.Program)
	}
	if k.Scenario != "" {
		parts = append(parts, k.Scenario)
	}
	switch {
	case k.Program != "" || k.VCPUs <= 0:
	case k.VCPUs == 1:
		parts = append(parts, "1 vCPU")
	default:
		parts = append(parts, fmt.Sprintf("%d vCPUs", k.VCPUs))
	}
	switch {
	case k.Corunner == "" || strings.Contains(k.Scenario, k.Corunner):
	case k.Corunners > 0:
		parts = append(parts, fmt.Sprintf("%d x %s", k.Corunners, k.Corunner))
	default:
		parts = append(parts, k.Corunner)
	}
	if k.Mode != "" {
		parts = append(parts, k.Mode)
	}
	if k.Threshold != "" {
		parts = append(parts, "threshold "+k.Threshold)
	}
	return parts
}

// settledWords says whether a lead's sign test settles it.
func settledWords(s decide.Sign) string {
	if s.Ahead() {
		return "settled by the sign test"
	}
	return "not settled"
}

// BottomLine is one sentence naming the best mode of each setting and its
// margin over the next; "" without cells.
func (t Table) BottomLine() string {
	var parts []string
	for _, r := range t.Rows {
		s := fmt.Sprintf("%s: %s", Label(r.Key), r.Best)
		if r.Next != "" {
			s += fmt.Sprintf(", %s ahead of %s", pct(r.Margin), r.Next)
			if r.Sign.N > 1 {
				s += fmt.Sprintf(" (faster than every other mode in %d of %d repetitions: %s)", r.Sign.Wins, r.Sign.N, settledWords(r.Sign))
			}
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return "Best mode per setting: " + strings.Join(parts, "; ") + "."
}

// Hybrid is the library's own wait mode (hybridsync's default policy):
// where it is not the best mode of a setting, HybridNote says by how much
// and why.
const Hybrid = "hybrid"

// spunExcess: hybrid's waits kept the CPU more often than the best mode's
// by at least this share of its timeline's waits for that to count as the
// cause of a gap (a few waits spin at every start, before the contention
// signal has judged its first window).
const spunExcess = 0.02

// HybridNote is one sentence on the settings whose best mode is not
// hybrid: how far behind it is in each, and why as far as the run shows.
// Where hybrid's fastest repetition was no slower than the best mode's
// slowest, the gap is within the spread. Where, beside a co-runner or
// under a quota, more of hybrid's timeline waits kept the CPU (spin or
// mixed: on it for a fifth of the wait or more) than the best mode's, the
// cause is its contention signal: hybrid blocks at once only while the
// signal, drawn from the thread's run delay per scheduling-in (schedstat),
// its CPU's idle time and its cgroup's throttling, says the CPU is
// shared; before its first window that shows contention, and once the
// CPU idles (a co-runner held back by its quota), the waits spin or
// sleep-then-spin, and a spin beside a busy co-runner can lose the CPU
// for the co-runner's whole slice (docs/experiments.md, "What the bottom
// line says of hybrid").
// Otherwise the run recorded no cause, and the sentence says so. "" where
// hybrid is best wherever it ran.
func (t Table) HybridNote() string {
	var spun, spread, other []string
	behind, settings := 0, 0
	for _, r := range t.Rows {
		h, ok := r.Cells[Hybrid]
		if !ok {
			continue
		}
		settings++
		if r.Best == Hybrid {
			continue
		}
		behind++
		b := r.Cells[r.Best]
		gap := fmt.Sprintf("%s behind %s in %s", pct(h.WallS/b.WallS-1), r.Best, Label(r.Key))
		hs, hok := h.SpunShare()
		bs, bok := b.SpunShare()
		switch {
		case h.MinS > 0 && b.MaxS > 0 && h.MinS <= b.MaxS:
			spread = append(spread, gap)
		case hok && bok && r.Key.Scenario != t.Reference && hs >= bs+spunExcess:
			spun = append(spun, fmt.Sprintf("%s (%s of its timeline's waits kept the CPU, %s of %s's)", gap, pct(hs), pct(bs), r.Best))
		default:
			other = append(other, gap)
		}
	}
	if behind == 0 {
		return ""
	}
	var clauses []string
	if len(spun) > 0 {
		clauses = append(clauses, strings.Join(spun, ", ")+
			": it blocks at once only while its contention signal (the thread's run delay per scheduling-in, from schedstat, its CPU's idle time and its cgroup's throttling) says the CPU is shared, its waits spin before the first window that shows contention and once the CPU idles (a co-runner held back by its quota), and a spin beside a busy co-runner can lose the CPU for the co-runner's whole slice")
	}
	if len(spread) > 0 {
		clauses = append(clauses, strings.Join(spread, ", ")+
			": within the spread of the repetitions (its fastest was no slower than the other's slowest)")
	}
	if len(other) > 0 {
		clauses = append(clauses, strings.Join(other, ", ")+
			": a gap this run recorded no cause for (its waits kept the CPU no more often than the other's, or the timeline has no wait kinds)")
	}
	return fmt.Sprintf("hybrid, the library's mode, is behind in %d of %d settings: %s.", behind, settings, strings.Join(clauses, "; "))
}

// Warnings name the settings whose repetitions disagree by more than the
// margin that ranks their two leading modes: there the ranking is within
// the noise.
func (t Table) Warnings() []string {
	var w []string
	for _, r := range t.Rows {
		spread, m, noisy := r.Noisy()
		if !noisy {
			continue
		}
		e := r.Cells[m]
		w = append(w, fmt.Sprintf("%s: repetitions of one cell differ by %s (%s: %s to %s), more than the %s by which %s leads %s: the ranking is not settled (more --reps, a quieter machine)",
			Label(r.Key), pct(spread), m, Seconds(e.MinS), Seconds(e.MaxS), pct(r.Margin), r.Best, r.Next))
	}
	return w
}

func pct(x float64) string {
	if x < 0.1 {
		return fmt.Sprintf("%.1f%%", 100*x)
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

// Scenarios are the scenario names of t's rows, each with what it means
// (results.ScenarioDoc), in the rows' order: "baseline = the runner alone
// ...".
func (t Table) Scenarios() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range t.Rows {
		if seen[r.Key.Scenario] {
			continue
		}
		seen[r.Key.Scenario] = true
		doc := results.ScenarioDoc(r.Key.Scenario)
		if doc == "" {
			doc = "(not a scenario this build knows)"
		}
		out = append(out, r.Key.Scenario+" = "+doc)
	}
	return out
}

// WriteConclusion writes what run's table has under it:
// the scenarios defined, the bottom line, the note on hybrid
// (HybridNote) and the warnings.
func (t Table) WriteConclusion(w io.Writer) error {
	bottom := t.BottomLine()
	if n := t.HybridNote(); n != "" {
		bottom += "\n" + n
	}
	return WriteConclusion(w, t.Scenarios(), bottom, t.Warnings())
}

// WriteConclusion writes a conclusion from its parts (Scenarios,
// BottomLine, Warnings), for renderers that hold them rather than a Table.
func WriteConclusion(w io.Writer, scenarios []string, bottomLine string, warnings []string) error {
	var b strings.Builder
	if len(scenarios) > 0 {
		fmt.Fprintf(&b, "Scenarios: %s.\n", strings.Join(scenarios, "; "))
	}
	if bottomLine != "" {
		fmt.Fprintln(&b, bottomLine)
	}
	for _, x := range warnings {
		fmt.Fprintf(&b, "warning: %s\n", x)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
