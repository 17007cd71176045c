// Package html renders a report as one self-contained HTML page: embedded
// CSS and inline SVG plots drawn with gonum.org/v1/plot, no scripts, no
// network, so it can be mailed, archived and opened anywhere.
//
// Plots: slowdown against the reference (the fastest cell of the
// reference scenario per vCPU count, as every output) per setting and wait
// mode (the paper's Figs. 1, 4-6), GPU utilisation per setting (its vGPU
// under-utilisation), latency CDFs of kernel launch and completion notice
// (Table II's distributions), GPU utilisation over time (NVML, or derived
// from kernel times), and an on/off-CPU strip of the most contended cell
// (Figs. 7-9). Tables: the cells, Table II, the verdict, VMs ranked by
// interference with their recommendation, hybridsync and GPU stats.
package html

import (
	_ "embed"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/vgpu-probe/vgpu-probe/profiler/report"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

//go:embed report.css
var css string

//go:embed report.html.tmpl
var pageSrc string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"us":      report.FormatUS,
	"latency": report.Latency,
	"pair":    report.Pair,
	"verdict": report.VerdictWord,
	"ratio":   ratio,
	"pct":     func(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) },
	"f1":      func(x float64) string { return fmt.Sprintf("%.1f", x) },
	"f0":      func(x float64) string { return fmt.Sprintf("%.0f", x) },
	"f3":      func(x float64) string { return fmt.Sprintf("%.3f", x) },
	"add1":    func(i int) int { return i + 1 },
	"lower":   strings.ToLower,
	"slug":    func(s string) string { return strings.NewReplacer(" ", "-", ".", "-").Replace(strings.ToLower(s)) },
}).Parse(pageSrc))

func ratio(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

// Figure is one plot in the page.
type Figure struct {
	ID      string
	Caption string
	SVG     template.HTML // produced by gonum's SVG canvas, which escapes text
}

type experimentView struct {
	report.Experiment
	Figures []Figure
	// Setup is the meta line's parts about how it ran: only what the
	// file records.
	Setup []string
	// Columns are the optional columns some cell measured
	// (report.MeasuredColumns), Rows the cells' values in them.
	Columns []string
	Rows    []cellRow
}

// cellRow is one cell of the cells' table.
type cellRow struct {
	report.Cell
	Values []string
}

// view of e: its figures, and its cells' table with only the columns
// some cell measured.
func newExperimentView(e report.Experiment, figs []Figure) experimentView {
	v := experimentView{Experiment: e, Figures: figs, Setup: []string{e.Backend + " backend"}}
	if e.Device != "" {
		v.Setup = append(v.Setup, "device "+e.Device)
	}
	if e.Machine.CPUs > 0 {
		v.Setup = append(v.Setup, fmt.Sprintf("%d CPUs", e.Machine.CPUs))
	}
	if e.Machine.Kernel != "" {
		v.Setup = append(v.Setup, "kernel "+e.Machine.Kernel)
	}
	if e.Machine.GPU != "" {
		v.Setup = append(v.Setup, e.Machine.GPU)
	}
	if e.Steps > 0 {
		v.Setup = append(v.Setup, fmt.Sprintf("%d steps", e.Steps))
	}
	v.Setup = append(v.Setup, fmt.Sprintf("median of %d", e.Reps))
	cols := report.MeasuredColumns(e.Cells)
	for _, c := range cols {
		v.Columns = append(v.Columns, c.Name)
	}
	for _, c := range e.Cells {
		row := cellRow{Cell: c}
		for _, col := range cols {
			row.Values = append(row.Values, strings.ReplaceAll(col.Text(c, e.Reference), "-", "–"))
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

// appsView is an apps table as text cells (apptable.Columns), and its
// comparisons for CPU speed (apptable.AdjustedColumns).
type appsView struct {
	report.AppsTable
	Head, AdjHead   []string
	Cells, AdjCells [][]string
}

type view struct {
	*report.Report
	CSS         template.CSS
	Experiments []experimentView
	Apps        []appsView
	AppsNote    string
	// AdjustedNote captions the apps tables' comparisons for CPU speed.
	AdjustedNote string
	GPUFigures   []Figure
	VMFigures    []Figure
}

// Render writes r as an HTML page.
func Render(w io.Writer, r *report.Report) error {
	v := view{Report: r, CSS: template.CSS(css), AppsNote: apptable.TableNote, AdjustedNote: apptable.AdjustedNote}
	for _, t := range r.Apps {
		av := appsView{AppsTable: t}
		av.Head, av.Cells = apptable.Columns(t.Rows)
		av.AdjHead, av.AdjCells = apptable.AdjustedColumns(t.ForCPUSpeed)
		v.Apps = append(v.Apps, av)
	}
	for i, e := range r.Experiments {
		figs, err := experimentFigures(i, e, r.Traces)
		if err != nil {
			return fmt.Errorf("plot %s: %w", e.Source, err)
		}
		v.Experiments = append(v.Experiments, newExperimentView(e, figs))
	}
	figs, err := gpuFigures(r)
	if err != nil {
		return fmt.Errorf("plot GPU utilisation: %w", err)
	}
	v.GPUFigures = figs
	p, err := vmRanking(r.VMs)
	f, err := figure("vm-ranking", "VMs ranked by the share of time their vCPUs were runnable but not running; the label gives the recommendation.", p, err)
	if err != nil {
		return err
	}
	if f != nil {
		v.VMFigures = append(v.VMFigures, *f)
	}
	// The timeline of the most interfered-with VM that has one.
	for _, vm := range r.VMs {
		i := slices.IndexFunc(r.AgentTraces, func(t report.AgentTrace) bool { return t.Source == vm.Source && t.Target == vm.Name })
		if i < 0 {
			continue
		}
		p, err := agentStrip(r.AgentTraces[i])
		f, err := figure("vm-strip", "On and off the CPU, from the agent's timeline of "+vm.Name+", the VM ranked first that has one: red, runnable but waiting for a CPU (descheduled); grey, off by choice (halted or asleep).", p, err)
		if err != nil {
			return err
		}
		if f != nil {
			v.VMFigures = append(v.VMFigures, *f)
			break
		}
	}
	p, err = offCPUCDF(r.AgentTraces)
	f, err = figure("offcpu-cdf", "How long each target's threads stayed off the CPU, from the agents' switch timelines (the vCPU discontinuity of the paper's Sec. II).", p, err)
	if err != nil {
		return err
	}
	if f != nil {
		v.VMFigures = append(v.VMFigures, *f)
	}
	return page.Execute(w, v)
}

func figure(id, caption string, p *chart, err error) (*Figure, error) {
	if err != nil || p == nil {
		return nil, err
	}
	s, err := svg(p, plotW, plotH)
	if err != nil {
		return nil, err
	}
	return &Figure{ID: id, Caption: caption, SVG: template.HTML(s)}, nil
}

func experimentFigures(idx int, e report.Experiment, traces []report.Trace) ([]Figure, error) {
	var figs []Figure
	addFig := func(f *Figure, err error) error {
		if f != nil {
			figs = append(figs, *f)
		}
		return err
	}
	id := func(s string) string { return fmt.Sprintf("e%d-%s", idx+1, s) }
	p, err := groupedBars("Slowdown against the fastest "+e.Reference+" cell", "time / reference's", e.Cells, false,
		func(c report.Cell) float64 { return c.Slowdown }, 1)
	if err := addFig(figure(id("slowdown"), "Runtime slowdown per setting and wait mode (like the paper's Figs. 1, 4-6): "+e.SlowdownIs+" ("+e.References+"); the dashed line is the reference.", p, err)); err != nil {
		return nil, err
	}
	p, err = groupedBars("GPU utilisation", "share of wall time a kernel ran, %", e.Cells, true,
		func(c report.Cell) float64 { return 100 * c.GPUUtil }, 0)
	if err := addFig(figure(id("gpu-util"), "GPU utilisation per setting and wait mode (the paper's vGPU under-utilisation): the share of time each runner stream had a kernel running, kernels/s per stream × mean kernel time.", p, err)); err != nil {
		return nil, err
	}
	// CDFs: each mode under the most contended setting, next to its
	// baseline (dashed).
	var mine []report.Trace
	for _, t := range traces {
		if t.Experiment == idx {
			mine = append(mine, t)
		}
	}
	contended := ""
	if e.Latency != nil {
		contended = e.Latency.Setting
	}
	var launch, receive []cdfLine
	var modes []string
	var hasHot, hasBase bool
	var strip *report.Trace
	for i, m := range modesOf(e.Cells) {
		var hot, base *report.Trace
		for j := range mine {
			t := &mine[j]
			if t.Key.Mode != m {
				continue
			}
			switch {
			case compare.Label(report.Setting(t.Key)) == contended:
				hot = t
			case t.Key.Scenario == "baseline":
				base = t
			}
		}
		for _, t := range []*report.Trace{hot, base} {
			if t != nil {
				l, rc := latencies(t)
				launch = append(launch, cdfLine{l, i, t == base})
				receive = append(receive, cdfLine{rc, i, t == base})
			}
		}
		if hot != nil || base != nil {
			modes = append(modes, m)
		}
		hasHot, hasBase = hasHot || hot != nil, hasBase || base != nil
		if hot != nil && (strip == nil || hot.Key.Mode == "spin") {
			strip = hot
		}
	}
	// One legend entry per mode (a colour) and per setting (solid or
	// dashed), rather than one per line: short enough to sit beside the
	// plot, and the caption names the contended setting.
	legend := func(p *chart) {
		if p == nil {
			return
		}
		for i, m := range modesOf(e.Cells) {
			if slices.Contains(modes, m) {
				p.addLegend(m, lineKey(plotutil.Color(i), vg.Points(1.5), nil))
			}
		}
		if hasHot {
			p.addLegend("contended", lineKey(color.Black, vg.Points(1.5), nil))
		}
		if hasBase {
			p.addLegend("baseline", lineKey(color.Black, vg.Points(1.5), cdfDashes))
		}
	}
	p, err = cdf("Kernel launch latency", launch)
	legend(p)
	if err := addFig(figure(id("launch-cdf"), "CDF of the delay from the end of a step's host work to its kernel launch, over the timeline window (solid: "+contended+"; dashed: baseline).", p, err)); err != nil {
		return nil, err
	}
	p, err = cdf("Kernel receive latency", receive)
	legend(p)
	if err := addFig(figure(id("receive-cdf"), "CDF of the delay from a kernel's completion to the host noticing it (Table II's \"receiving kernel\"; solid: "+contended+"; dashed: baseline).", p, err)); err != nil {
		return nil, err
	}
	if names, sets := gpuTimeSeries(e, mine); len(sets) > 0 {
		p, err = series("GPU utilisation over time (derived)", "kernel busy, % per 5 ms", names, sets, 105)
		if err := addFig(figure(id("gpu-time"), "GPU busy share (mean over the runner's streams) over the timeline window, from kernel launch and completion times, per wait mode under "+contended+".", p, err)); err != nil {
			return nil, err
		}
	}
	if strip != nil {
		p, err = onCPUStrip("Timeline: "+compare.Label(strip.Key), *strip)
		if err := addFig(figure(id("strip"), "Sync waits, kernels and on-CPU intervals of "+compare.Label(strip.Key)+" (like the paper's Figs. 7-9); the Perfetto trace (--format perfetto) shows every cell.", p, err)); err != nil {
			return nil, err
		}
	}
	return figs, nil
}

// latencies returns a trace's launch and receive latencies in µs.
func latencies(t *report.Trace) (launch, receive []float64) {
	for _, s := range t.Steps {
		launch = append(launch, float64(s.Launch-s.HostEnd)/1e3)
		if s.Complete >= 0 {
			receive = append(receive, float64(s.Noticed-s.Complete)/1e3)
		}
	}
	return launch, receive
}

// gpuFigures plots NVML utilisation over time, one line per GPU.
func gpuFigures(r *report.Report) ([]Figure, error) {
	var figs []Figure
	for i, s := range r.GPUSeries {
		byGPU := map[int]plotter.XYs{}
		var t0 float64
		for j, x := range s.Samples {
			t := float64(x.Time.UnixNano()) / 1e9
			if j == 0 {
				t0 = t
			}
			byGPU[x.GPU] = append(byGPU[x.GPU], plotter.XY{X: t - t0, Y: float64(x.UtilPct)})
		}
		var names []string
		var sets []plotter.XYs
		for _, d := range s.Devices {
			names = append(names, fmt.Sprintf("GPU %d %s", d.Index, d.Name))
			sets = append(sets, byGPU[d.Index])
		}
		p, err := series("GPU utilisation over time (NVML)", "utilisation, %", names, sets, 105)
		f, err := figure(fmt.Sprintf("nvml-%d", i+1), "NVML utilisation samples of "+s.Source+", every "+fmt.Sprintf("%g", s.IntervalS)+" s.", p, err)
		if err != nil {
			return nil, err
		}
		if f != nil {
			figs = append(figs, *f)
		}
	}
	return figs, nil
}

// binNs is the bin of the derived utilisation curve: long enough to hold
// several steps (≈0.7 ms each), short enough to show a 4 ms tick's gap.
const binNs = 5e6

// maxBins bounds the curve to an hour of timeline: a results file with
// corrupt timestamps must not make the report allocate without limit.
const maxBins = 3600e9 / binNs

// gpuTimeSeries bins kernel busy time per mode for the traces of the
// most contended setting (all traces when there is none).
func gpuTimeSeries(e report.Experiment, traces []report.Trace) ([]string, []plotter.XYs) {
	contended := ""
	if e.Latency != nil {
		contended = e.Latency.Setting
	}
	var names []string
	var sets []plotter.XYs
	for _, t := range traces {
		if contended != "" && compare.Label(report.Setting(t.Key)) != contended {
			continue
		}
		if len(t.Steps) == 0 {
			continue
		}
		t0 := t.Steps[0].HostStart
		end := t.Steps[len(t.Steps)-1].Noticed
		n := int(math.Ceil(float64(end-t0) / binNs))
		if n <= 0 || n > maxBins {
			continue // an empty or absurd window (corrupt times): no curve
		}
		busy := make([]float64, n)
		streams := map[int]bool{}
		for _, s := range t.Steps {
			streams[s.Thread] = true
		}
		for _, s := range t.Steps {
			if s.Complete < 0 {
				continue
			}
			for a := max(s.Launch, t0); a < s.Complete; {
				b := int(float64(a-t0) / binNs)
				if b >= n {
					break
				}
				edge := t0 + int64(float64(b+1)*binNs)
				stop := min(edge, s.Complete)
				busy[b] += float64(stop - a)
				a = stop
			}
		}
		xys := make(plotter.XYs, 0, n)
		for b := range busy {
			width := math.Min(binNs, float64(end-t0)-float64(b)*binNs)
			if width < binNs/2 {
				break // a last, partial bin would read as a drop
			}
			// Mean over the runner's streams, one per vCPU thread.
			xys = append(xys, plotter.XY{X: (float64(b) + 0.5) * binNs / 1e9, Y: 100 * busy[b] / width / float64(len(streams))})
		}
		names = append(names, t.Key.Mode)
		sets = append(sets, xys)
	}
	return names, sets
}
