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
)

// Cell is one measured cell: its key, its median time and the times of
// its repetitions.
type Cell struct {
	Key   results.Key
	WallS float64
	// Reps are the repetitions' times (the same measure as WallS), for
	// the spread; none is fine.
	Reps []float64
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
	// mode.
	Best, Next string
	Margin     float64
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
		if f.Config.PerStep {
			cell.WallS = 0
		}
		for _, r := range c.Reps {
			cell.Reps = append(cell.Reps, measure(r, f.Config.PerStep))
		}
		if f.Config.PerStep {
			cell.WallS = median(cell.Reps)
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

// measure is a run's time as compared: its wall time, or per step.
func measure(r results.Result, perStep bool) float64 {
	if perStep && r.Steps > 0 {
		return r.WallS / float64(r.Steps)
	}
	return r.WallS
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Build compares cells against the cells of the scenario called
// reference. Cells without a time (0) are left out.
func Build(cells []Cell, reference string) Table {
	t := Table{Reference: reference, Refs: map[RefKey]Ref{}}
	index := map[results.Key]int{}
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
		e := Entry{WallS: c.WallS}
		for j, r := range c.Reps {
			if j == 0 || r < e.MinS {
				e.MinS = r
			}
			e.MaxS = max(e.MaxS, r)
		}
		t.Rows[i].Cells[c.Key.Mode] = e
	}
	for i := range t.Rows {
		r := &t.Rows[i]
		var ranked []string
		for _, m := range t.Modes {
			if _, ok := r.Cells[m]; ok {
				ranked = append(ranked, m)
			}
		}
		slices.SortStableFunc(ranked, func(a, b string) int { return cmp.Compare(r.Cells[a].WallS, r.Cells[b].WallS) })
		r.Best = ranked[0]
		if len(ranked) > 1 {
			r.Next = ranked[1]
			r.Margin = r.Cells[r.Next].WallS/r.Cells[r.Best].WallS - 1
		}
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

// Label names a setting (a key; its mode is left out): "shared1 4 vCPUs
// 1 x while1", with the program first and the threshold last where set.
func Label(k results.Key) string {
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
	// bench's and apps' settings name their co-runner (while1).
	if k.Corunners > 0 && k.Corunner != "" && !strings.Contains(k.Scenario, k.Corunner) {
		parts = append(parts, fmt.Sprintf("%d x %s", k.Corunners, k.Corunner))
	}
	if k.Threshold != "" {
		parts = append(parts, "threshold "+k.Threshold)
	}
	return strings.Join(parts, " ")
}

// BottomLine is one sentence naming the best mode of each setting and its
// margin over the next; "" without cells.
func (t Table) BottomLine() string {
	var parts []string
	for _, r := range t.Rows {
		s := fmt.Sprintf("%s: %s", Label(r.Key), r.Best)
		if r.Next != "" {
			s += fmt.Sprintf(", %s ahead of %s", pct(r.Margin), r.Next)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return "Best mode per setting: " + strings.Join(parts, "; ") + "."
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

// WriteConclusion writes what every text output puts under its table: the
// scenarios defined, the bottom line and the warnings.
func (t Table) WriteConclusion(w io.Writer) error {
	return WriteConclusion(w, t.Scenarios(), t.BottomLine(), t.Warnings())
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
