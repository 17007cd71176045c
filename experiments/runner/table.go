package runner

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/vgpu-probe/vgpu-probe/experiments/scenario"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// PrintTable prints the results table: one row per scenario, vCPU count
// and co-runner count, one column per mode; each cell gives its median
// wall time and its slowdown against the one reference of its vCPU count
// (compare.FromFile), and * marks the fastest mode of the row. Under it:
// the scenarios defined, the best mode of each row with its margin, and a
// warning where the repetitions disagree by more than that margin.
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
		"%s, %s backend, %d reps; reference %s.\n\n", t.Definition(), what, c.Backend, c.Reps, t.References())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\tvCPUs\tco-runners\t%s\t\n", strings.Join(t.Modes, "\t"))
	for _, r := range t.Rows {
		co := "-"
		if r.Key.Corunners > 0 {
			co = fmt.Sprintf("%d x %s", r.Key.Corunners, shorten(r.Key.Corunner))
		}
		vc := strconv.Itoa(r.Key.VCPUs)
		if n, ok := runnerVCPUs[r.Key.VCPUs]; ok && r.Key.Scenario == scenario.Baseline {
			vc = fmt.Sprintf("%d (runner %d)", r.Key.VCPUs, n)
		}
		cols := make([]string, len(t.Modes))
		for i, m := range t.Modes {
			if e, ok := r.Cells[m]; ok {
				cols[i] = e.String()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.Key.Scenario, vc, co, strings.Join(cols, "\t"))
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

func shorten(s string) string {
	if len(s) > 24 {
		return s[:21] + "..."
	}
	return s
}
