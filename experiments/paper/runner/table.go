package runner

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/scenario"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// PrintTable prints the results table: one row per setting (scenario,
// vCPU count and co-runners, named by compare.Label as report names it),
// one column per mode; each cell gives its median wall time and its
// slowdown against the one reference of its vCPU count
// (compare.FromFile), and * marks the fastest mode of the row. Under it:
// the scenarios defined, the best mode of each row with its margin, where
// hybrid is not the best, by how much and why (compare.Table.HybridNote),
// and a warning where the repetitions disagree by more than that margin.
func PrintTable(w io.Writer, f *results.File) error {
	runnerVCPUs := map[int]int{}
	for _, c := range f.Cells {
		if c.Scenario == scenario.Baseline {
			runnerVCPUs[c.VCPUs] = c.RunnerVCPUs
		}
	}
	t := compare.FromFile(f)
	c := f.Config
	what := c.Workload
	if c.Device != "" {
		what = fmt.Sprintf("%s on %s", c.Workload, c.Device)
	}
	fmt.Fprintf(w, "Each cell: median wall time and slowdown (%s). * marks each row's fastest mode.\n"+
		"%s, %s backend, %d reps; reference %s.%s\n\n", t.Definition(), what, c.Backend, c.Reps, t.References(), runners(runnerVCPUs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "setting\t%s\t\n", strings.Join(t.Modes, "\t"))
	for _, r := range t.Rows {
		cols := make([]string, len(t.Modes))
		for i, m := range t.Modes {
			if e, ok := r.Cells[m]; ok {
				cols[i] = e.String()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", compare.Label(r.Key), strings.Join(cols, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := t.WriteConclusion(w); err != nil {
		return err
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// runners says how many vCPUs the runner had in the baseline cells of
// each vCPU count, where that is fewer (half, Table I): " Baseline
// runner: 1 vCPU of 2."; "" where none is.
func runners(byVCPUs map[int]int) string {
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(byVCPUs)) {
		if n := byVCPUs[v]; n > 0 && n != v {
			parts = append(parts, fmt.Sprintf("%d of %d", n, v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " The baseline's runner has " + strings.Join(parts, ", ") + " vCPUs."
}
