// Package compare puts an experiment's cells side by side against one
// yardstick: per vCPU count, the reference is the fastest baseline cell
// whatever its mode, and every cell's slowdown is its median wall time over
// that reference. Dividing each mode by its own baseline instead hides how
// far apart the modes are (their baselines differ by up to 1.7x), so a
// mode could read best in a row where it was slowest.
package compare

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/results"
)

// Cell is one measured cell: its key and median wall time.
type Cell struct {
	Key   results.Key
	WallS float64
}

// Ref is the reference of one vCPU count: the fastest baseline cell.
type Ref struct {
	Mode  string
	WallS float64
}

// Entry is one cell as compared.
type Entry struct {
	WallS float64
	// VsRef is WallS over the reference of the cell's vCPU count; 0 when
	// that count has no baseline cell.
	VsRef float64
	// Fastest marks the mode with the least wall time in the cell's row.
	Fastest bool
}

// Row is the cells that differ only in mode: one scenario, vCPU count and
// co-runner setting.
type Row struct {
	Key   results.Key // Mode is ""
	Cells map[string]Entry
}

// Table is the comparison of a set of cells.
type Table struct {
	Modes []string    // in the order they first appear
	Rows  []Row       // by vCPU count, baseline first, then by scenario
	Refs  map[int]Ref // by vCPU count
}

// Build compares cells. Cells without a wall time (0) are left out.
func Build(cells []Cell) Table {
	t := Table{Refs: map[int]Ref{}}
	index := map[results.Key]int{}
	for _, c := range cells {
		if c.WallS <= 0 {
			continue
		}
		if !slices.Contains(t.Modes, c.Key.Mode) {
			t.Modes = append(t.Modes, c.Key.Mode)
		}
		if c.Key.Scenario == Baseline {
			if r, ok := t.Refs[c.Key.VCPUs]; !ok || c.WallS < r.WallS {
				t.Refs[c.Key.VCPUs] = Ref{Mode: c.Key.Mode, WallS: c.WallS}
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
		t.Rows[i].Cells[c.Key.Mode] = Entry{WallS: c.WallS}
	}
	for _, r := range t.Rows {
		fastest := ""
		for _, m := range t.Modes {
			if e, ok := r.Cells[m]; ok && (fastest == "" || e.WallS < r.Cells[fastest].WallS) {
				fastest = m
			}
		}
		for m, e := range r.Cells {
			if ref := t.Refs[r.Key.VCPUs]; ref.WallS > 0 {
				e.VsRef = e.WallS / ref.WallS
			}
			e.Fastest = m == fastest
			r.Cells[m] = e
		}
	}
	slices.SortStableFunc(t.Rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Key.VCPUs, b.Key.VCPUs), order(a.Key, b.Key))
	})
	return t
}

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

// Baseline is the scenario whose cells give the reference (the runner
// alone: Table I's baseline, as results.Key names it).
const Baseline = "baseline"

// order sorts a vCPU count's rows: the baseline first (it holds the
// reference), then by scenario (shared1 before shared2, Table I's order),
// fewer co-runners first.
func order(a, b results.Key) int {
	notBase := func(k results.Key) int {
		if k.Scenario == Baseline {
			return 0
		}
		return 1
	}
	return cmp.Or(cmp.Compare(notBase(a), notBase(b)), cmp.Compare(a.Scenario, b.Scenario),
		cmp.Compare(a.Corunners, b.Corunners), cmp.Compare(a.Corunner, b.Corunner))
}

// String is the entry as tables show it: "0.391s 1.80x", with a * when it
// is its row's fastest mode; seconds alone without a reference.
func (e Entry) String() string {
	s := fmt.Sprintf("%.3fs", e.WallS)
	if e.VsRef > 0 {
		s += fmt.Sprintf(" %.2fx", e.VsRef)
	}
	if e.Fastest {
		s += "*"
	}
	return s
}

// References says what each vCPU count's cells are divided by, e.g.
// "2 vCPUs: yield 0.218s".
func (t Table) References() string {
	var parts []string
	for _, r := range t.Rows {
		if ref, ok := t.Refs[r.Key.VCPUs]; ok && r.Key.Scenario == Baseline {
			parts = append(parts, fmt.Sprintf("%d vCPUs: %s %.3fs", r.Key.VCPUs, ref.Mode, ref.WallS))
		}
	}
	if len(parts) == 0 {
		return "none (no baseline cells: seconds only)"
	}
	return strings.Join(parts, ", ")
}
