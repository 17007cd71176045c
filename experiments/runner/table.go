package runner

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/vgpu-probe/vgpu-probe/experiments/results"
	"github.com/vgpu-probe/vgpu-probe/experiments/scenario"
)

// PrintTable prints the slowdown table: one row per scenario, vCPU count
// and co-runner count, one column per mode; baseline rows give the wall
// time the others are divided by.
func PrintTable(w io.Writer, f *results.File) error {
	var modes []string
	type row struct {
		key   results.Key
		cells map[string]results.Cell
	}
	var rows []*row
	find := func(k results.Key) *row {
		for _, r := range rows {
			if r.key == k {
				return r
			}
		}
		r := &row{key: k, cells: map[string]results.Cell{}}
		rows = append(rows, r)
		return r
	}
	for _, c := range f.Cells {
		if !slices.Contains(modes, c.Mode) {
			modes = append(modes, c.Mode)
		}
		k := c.Key
		k.Mode = ""
		find(k).cells[c.Mode] = c
	}
	slices.SortStableFunc(rows, func(a, b *row) int {
		if a.key.VCPUs != b.key.VCPUs {
			return a.key.VCPUs - b.key.VCPUs
		}
		return scenarioRank(a.key) - scenarioRank(b.key)
	})
	c := f.Config
	what := c.Workload
	if c.Device != "" {
		what = fmt.Sprintf("%s on %s", c.Workload, c.Device)
	}
	fmt.Fprintf(w, "Slowdown vs baseline: median wall time / the baseline's (same mode and vCPUs).\n%s, %s backend, %d reps; baseline rows give seconds.\n\n", what, c.Backend, c.Reps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\tvCPUs\tco-runners\t%s\t\n", strings.Join(modes, "\t"))
	for _, r := range rows {
		co := "-"
		if r.key.Corunners > 0 {
			co = fmt.Sprintf("%d x %s", r.key.Corunners, shorten(r.key.Corunner))
		}
		vc := strconv.Itoa(r.key.VCPUs)
		var cols []string
		for _, m := range modes {
			cell, ok := r.cells[m]
			switch {
			case !ok:
				cols = append(cols, "")
			case r.key.Scenario == scenario.Baseline:
				cols = append(cols, fmt.Sprintf("%.3fs", cell.Median.WallS))
				vc = fmt.Sprintf("%d (runner %d)", r.key.VCPUs, cell.RunnerVCPUs)
			case cell.Slowdown > 0:
				cols = append(cols, fmt.Sprintf("%.2fx", cell.Slowdown))
			default:
				cols = append(cols, fmt.Sprintf("%.3fs", cell.Median.WallS))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.key.Scenario, vc, co, strings.Join(cols, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func scenarioRank(k results.Key) int {
	for i, n := range scenario.Names() {
		if n == k.Scenario {
			// Baseline first: it is what the rows below are divided by.
			if n == scenario.Baseline {
				return -1
			}
			return i*100 + k.Corunners
		}
	}
	return 1000
}

func shorten(s string) string {
	if len(s) > 24 {
		return s[:21] + "..."
	}
	return s
}
