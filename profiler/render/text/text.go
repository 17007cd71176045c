// Package text renders a report as terminal tables: what `vgpu-probe
// report` prints by default.
package text

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/vgpu-probe/vgpu-probe/profiler/report"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// Render writes r as plain-text tables.
func Render(w io.Writer, r *report.Report) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "vgpu-probe report, %s\n", r.Generated.Format("2006-01-02 15:04:05 UTC"))
	for _, e := range r.Experiments {
		experiment(bw, e)
	}
	for _, t := range r.Apps {
		appsTable(bw, t)
	}
	if len(r.VMs) > 0 {
		vms(bw, r.VMs)
	}
	if len(r.Sync) > 0 {
		syncStats(bw, r.Sync)
	}
	if len(r.GPUs) > 0 {
		gpus(bw, r.GPUs)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(bw, "\nNotes")
		for _, n := range r.Notes {
			fmt.Fprintf(bw, "  - %s\n", n)
		}
	}
	return bw.err
}

// appsTable is apps' table, as apps --from prints it, of the runs of
// t's sources taken together.
func appsTable(w io.Writer, t report.AppsTable) {
	fmt.Fprintf(w, "\n== apps table of %s", strings.Join(t.Sources, ", "))
	if t.Agent != "" {
		fmt.Fprintf(w, " (agent: %s)", t.Agent)
	}
	fmt.Fprintln(w, "\n"+apptable.TableNote)
	apptable.PrintTable(w, t.Rows)
	for _, r := range t.Failures {
		fmt.Fprintf(w, "FAILED %s %s %s rep %d: %s\n", r.Program, r.Contention, r.Arm, r.Rep+1, r.Error)
	}
	if len(t.ForCPUSpeed) > 0 {
		fmt.Fprintln(w, "\n"+apptable.AdjustedNote)
		apptable.PrintAdjusted(w, t.ForCPUSpeed)
	}
}

func experiment(w io.Writer, e report.Experiment) {
	fmt.Fprintf(w, "\n== %s: workload %s on %s (%s)\n", e.Source, e.Workload, e.Machine.Hostname, strings.Join(setup(e), ", "))
	fmt.Fprintf(w, "vs ref: %s (%s); * the fastest mode of its setting\n", e.SlowdownIs, e.References)
	tw := table(w)
	cols := report.MeasuredColumns(e.Cells)
	head := []string{"cell", "wall s", "vs ref"}
	for _, c := range cols {
		head = append(head, c.Name)
	}
	fmt.Fprintln(tw, strings.Join(append(head, "cpu s"), "\t")+"\t")
	for _, c := range e.Cells {
		row := []string{c.Label(), fmt.Sprintf("%.3f", c.WallS), vsRef(c)}
		for _, col := range cols {
			row = append(row, col.Text(c, e.Reference))
		}
		row = append(row, fmt.Sprintf("%.3f", c.CPUS))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	if t := e.Latency; t != nil {
		against := "classes (on the p99) against a " + report.FormatUS(t.CycleUS) + " step cycle"
		if t.CycleUS <= 0 {
			against = "not classed: no step cycle was measured"
		}
		fmt.Fprintf(w, "\nLatency (Table II) under %s; %s\n", t.Setting, against)
		tw := table(w)
		fmt.Fprintf(tw, "mode\tinvoking kernel p50 / p99\t(%[1]s)\treceiving kernel p50 / p99\t(%[1]s)\tvs ref\t\n", e.Reference)
		for _, row := range t.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", row.Mode,
				report.Latency(row.LaunchClass, row.LaunchUS, row.LaunchP99US), report.Pair(row.LaunchBaselineUS, row.LaunchBaselineP99US),
				report.Latency(row.ReceiveClass, row.ReceiveUS, row.ReceiveP99US), report.Pair(row.ReceiveBaselineUS, row.ReceiveBaselineP99US),
				ratio(row.Slowdown))
		}
		tw.Flush()
	}
	v := e.Verdict
	fmt.Fprintf(w, "\nVerdict: %s: %s\n", report.VerdictWord(v), v.Why)
	if v.Hybrid != "" {
		fmt.Fprintln(w, v.Hybrid)
	}
	compare.WriteConclusion(w, e.Scenarios, e.BottomLine, e.Warnings)
}

// setup is what the header says of how the experiment ran: only what
// its file records.
func setup(e report.Experiment) []string {
	parts := []string{e.Backend + " backend"}
	if e.Device != "" {
		parts = append(parts, "device "+e.Device)
	}
	if e.Steps > 0 {
		parts = append(parts, fmt.Sprintf("%d steps", e.Steps))
	}
	return append(parts, fmt.Sprintf("median of %d", e.Reps))
}

// vsRef is a cell's slowdown, "-" without one, and a * when it is the
// fastest mode of its setting.
func vsRef(c report.Cell) string {
	s := ratio(c.Slowdown)
	if c.Fastest {
		s += "*"
	}
	return s
}

func vms(w io.Writer, vms []report.VM) {
	fmt.Fprintln(w, "\nVMs ranked by interference (share of time vCPUs waited for a CPU)")
	tw := table(w)
	fmt.Fprintln(tw, "#\tVM\tsource\tvCPUs\twaited\tworst vCPU\tpreempt/s\toff-CPU p50\twake p50\ttop co-runner\trecommendation\t")
	for i, v := range vms {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.1f%%\t%.1f%%\t%.0f\t%s\t%s\t%s\t%s\t\n", i+1, v.Name, v.Source, v.VCPUs, v.StealPct, v.MaxStealPct,
			v.PreemptionsPerS, report.FormatUS(v.OffCPUP50US), report.FormatUS(v.WakeP50US), dash(v.TopCorunner), v.Recommendation.Action)
	}
	tw.Flush()
	for i, v := range vms {
		fmt.Fprintf(w, "  %d. %s: %s, because %s\n", i+1, v.Name, v.Recommendation.Action, v.Recommendation.Why)
	}
}

func syncStats(w io.Writer, ss []report.SyncStats) {
	fmt.Fprintln(w, "\nhybridsync stats")
	tw := table(w)
	fmt.Fprintln(tw, "source\tmode\tcalls\tready\tspin hit\tsleep+spin\tblocked\tspin s\tblock s\twake late\ttimer late\tslice\tdescheds\t")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%\t%.3f\t%.3f\t%s\t%s\t%s\t%d\t\n", s.Source, s.Mode, s.Calls, s.ReadyPct, s.SpinHitPct,
			s.SleepSpinPct, s.BlockPct, s.SpinS, s.BlockS, report.FormatUS(s.WakeLateUS), report.FormatUS(s.TimerLateUS), report.FormatUS(s.SliceUS), s.Deschedulings)
	}
	tw.Flush()
}

func gpus(w io.Writer, gs []report.GPU) {
	fmt.Fprintln(w, "\nGPUs (NVML)")
	tw := table(w)
	fmt.Fprintln(tw, "source\tGPU\tname\tsamples\tspan s\tmean util\tp50 util\tidle\tSM MHz\tmax mem MiB\tprocesses\t")
	for _, g := range gs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.1f%%\t%.0f%%\t%.0f%%\t%.0f\t%.0f\t%d\t\n", g.Source, g.Index, dash(g.Name), g.Samples, g.SpanS,
			g.MeanUtilPct, g.P50UtilPct, g.IdlePct, g.MeanSMMHz, g.MaxMemUsedMB, g.Processes)
	}
	tw.Flush()
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// errWriter keeps the first write error so Render can return it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
