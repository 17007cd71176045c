package html

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/vgpu-probe/vgpu-probe/profiler/report"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// Plot sizes: wide enough for a dozen settings' labels, small enough for
// two to sit in a laptop screen's height.
const (
	plotW = 16 * vg.Centimeter
	plotH = 9 * vg.Centimeter
)

func newPlot(title, x, y string) *chart {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	return &chart{Plot: p}
}

// lineKey is a legend thumbnail for a line style that no single plotted
// line stands for.
func lineKey(c color.Color, width vg.Length, dashes []vg.Length) *plotter.Line {
	return &plotter.Line{LineStyle: draw.LineStyle{Color: c, Width: width, Dashes: dashes}}
}

// modesOf lists the modes of cells in first-seen order.
func modesOf(cells []report.Cell) []string {
	var out []string
	for _, c := range cells {
		if !slices.Contains(out, c.Mode) {
			out = append(out, c.Mode)
		}
	}
	return out
}

// settingsOf lists the settings (keys without mode) in first-seen order,
// optionally without the baseline.
func settingsOf(cells []report.Cell, withBaseline bool) []results.Key {
	var out []results.Key
	for _, c := range cells {
		k := report.Setting(c.Key)
		if (!withBaseline && k.Scenario == "baseline") || slices.Contains(out, k) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// groupedBars draws one bar per mode in each setting group, like the
// paper's Figs. 4-6; value picks what the bar shows.
func groupedBars(title, ylabel string, cells []report.Cell, withBaseline bool, value func(report.Cell) float64, refLine float64) (*chart, error) {
	settings := settingsOf(cells, withBaseline)
	modes := modesOf(cells)
	if len(settings) == 0 || len(modes) == 0 {
		return nil, nil
	}
	p := newPlot(title, "", ylabel)
	w := vg.Points(math.Min(24, 300/float64(len(settings)*len(modes))))
	ymax := 0.0
	for i, m := range modes {
		vals := make(plotter.Values, len(settings))
		for j, s := range settings {
			for _, c := range cells {
				if report.Setting(c.Key) == s && c.Mode == m {
					vals[j] = value(c)
				}
			}
			ymax = math.Max(ymax, vals[j])
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bc.Color = plotutil.Color(i)
		bc.LineStyle.Width = 0
		bc.Offset = w * vg.Length(float64(i)-float64(len(modes)-1)/2)
		p.Add(bc)
		p.addLegend(m, bc)
	}
	if refLine > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: refLine}, {X: float64(len(settings)) - 0.5, Y: refLine}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 80}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
	}
	if !(ymax > 0) {
		return nil, nil // no cell measured it: no plot of zeros
	}
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = settingLines(s)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	// A corrupt file's absurd value would make the axis infinite and its
	// ticks endless.
	p.Y.Max = roundUp(ymax * 1.02)
	if math.IsInf(p.Y.Max, 0) || math.IsNaN(p.Y.Max) {
		return nil, nil
	}
	return p, nil
}

// roundUp is the round number at or above x (1, 1.2, 1.5, 2, 2.5, 3, 4,
// 5, 6 or 8 times a power of ten), where gonum's ticks end with short
// labels ("80", not "75.00"); x itself when not a positive number.
func roundUp(x float64) float64 {
	if !(x > 0) || math.IsInf(x, 0) {
		return x
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8} {
		if m*e >= x {
			return m * e
		}
	}
	return 10 * e
}

// settingLines names a setting (compare.Label) on up to three short
// lines, the program and scenario, the vCPUs, the co-runners and
// threshold, so that a dozen bar groups' labels fit side by side
// (fitXLabels tilts them when they do not).
func settingLines(k results.Key) string {
	parts := compare.LabelParts(k)
	n := 0
	if k.Program != "" {
		n++
	}
	if k.Scenario != "" {
		n++
	}
	n = max(1, min(n, len(parts)))
	lines := []string{strings.Join(parts[:n], " ")}
	if rest := parts[n:]; len(rest) > 0 {
		lines = append(lines, rest[0])
		if len(rest) > 1 {
			lines = append(lines, strings.Join(rest[1:], " "))
		}
	}
	return strings.Join(lines, "\n")
}

// cdfLine is one sample set of a CDF plot and its style: a palette
// colour, solid or dashed.
type cdfLine struct {
	values []float64
	color  int
	dashed bool
}

// cdfDashes is the dash pattern of dashed CDF lines and their legend key.
var cdfDashes = []vg.Length{vg.Points(5), vg.Points(3)}

// cdf draws the empirical CDF of each sample set, leaving the legend to
// the caller; values in µs on a log axis (latencies span sub-µs spins to
// tens of ms of descheduling).
func cdf(title string, lines []cdfLine) (*chart, error) {
	p := newPlot(title, "latency, µs (log scale)", "fraction of steps ≤ x")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	any := false
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, cl := range lines {
		if len(cl.values) == 0 {
			continue
		}
		s := slices.Clone(cl.values)
		slices.Sort(s)
		lo, hi = math.Min(lo, math.Max(s[0], 0.01)), math.Max(hi, s[len(s)-1])
		xys := make(plotter.XYs, 0, len(s)+1)
		for j, x := range s {
			// A log axis cannot show 0: clamp to 0.01 µs, below any
			// latency the clocks here resolve.
			x = math.Max(x, 0.01)
			xys = append(xys, plotter.XY{X: x, Y: float64(j+1) / float64(len(s))})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(cl.color)
		if cl.dashed {
			l.Dashes = cdfDashes
		}
		l.Width = vg.Points(1.5)
		p.Add(l)
		any = true
	}
	if !any {
		return nil, nil
	}
	// A log axis needs a positive range at least a decade wide; gonum's
	// own padding of a degenerate range would cross zero.
	p.X.Min, p.X.Max = lo, math.Max(hi, lo*10)
	if math.IsInf(p.X.Max, 0) {
		return nil, nil
	}
	return p, nil
}

// series draws lines over time (x in seconds).
func series(title, ylabel string, names []string, sets []plotter.XYs, ymax float64) (*chart, error) {
	p := newPlot(title, "time, s", ylabel)
	any := false
	for i, xys := range sets {
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.addLegend(names[i], l)
		any = true
	}
	if !any {
		return nil, nil
	}
	p.Y.Min = 0
	if ymax > 0 {
		p.Y.Max = ymax
	}
	return p, nil
}

// stripNs is the span the timeline strip shows: a few 4 ms scheduler ticks
// and several steps either side of the delayed one.
const stripNs = 30e6

// onCPUStrip draws a timeline strip like the paper's Figs. 7-9: for one
// cell, rows for the host thread's sync waits, the GPU's kernels and each
// thread's on-CPU intervals, over the timeline window.
func onCPUStrip(title string, tr report.Trace) (*chart, error) {
	type row struct {
		name  string
		spans [][2]float64
	}
	var rows []row
	var waits, kernels [][2]float64
	for _, s := range tr.Steps {
		if s.Thread != 0 {
			continue // the first runner vCPU stands for all
		}
		waits = append(waits, [2]float64{float64(s.Launch), float64(s.Noticed)})
		if s.Complete >= 0 {
			kernels = append(kernels, [2]float64{float64(s.Launch), float64(s.Complete)})
		}
	}
	rows = append(rows, row{"sync wait (" + tr.Key.Mode + ")", waits}, row{"GPU kernel", kernels})
	for _, th := range tr.Threads {
		var on [][2]float64
		for _, iv := range th.Intervals {
			if iv.On {
				on = append(on, [2]float64{float64(iv.Start), float64(iv.End)})
			}
		}
		rows = append(rows, row{th.Name + " on CPU", on})
	}
	// Zoom on the step noticed latest after its kernel completed, as the
	// paper's Figs. 7-9 zoom on one delayed cycle.
	worst, at := -1.0, 0.0
	for _, s := range tr.Steps {
		if s.Complete >= 0 && float64(s.Noticed-s.Complete) > worst {
			worst, at = float64(s.Noticed-s.Complete), float64(s.Complete)
		}
	}
	if worst < 0 {
		return nil, nil
	}
	lo, hi := at-stripNs/2, at+stripNs/2
	t0 := lo
	clipped := rows[:0]
	for _, r := range rows {
		var in [][2]float64
		for _, s := range r.spans {
			if s[1] > lo && s[0] < hi {
				in = append(in, [2]float64{math.Max(s[0], lo), math.Min(s[1], hi)})
			}
		}
		clipped = append(clipped, row{r.name, in})
	}
	rows = clipped
	p := newPlot(title, fmt.Sprintf("ms, around the step noticed latest (%s after completion)", report.FormatUS(worst/1e3)), "")
	names := make([]string, len(rows))
	for i, r := range rows {
		names[len(rows)-1-i] = r.name
		y := float64(len(rows) - 1 - i)
		for _, s := range r.spans {
			// Each span is a thick horizontal line segment.
			l, err := plotter.NewLine(plotter.XYs{{X: (s[0] - t0) / 1e6, Y: y}, {X: math.Max((s[1]-t0)/1e6, (s[0]-t0)/1e6+0.01), Y: y}})
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(10)
			l.LineStyle.Dashes = nil
			l.StepStyle = plotter.NoStep
			p.Add(l)
		}
	}
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, stripNs/1e6
	p.Y.Min, p.Y.Max = -0.6, float64(len(rows))-0.4
	p.Y.Tick.Label.XAlign = draw.XRight
	return p, nil
}

// maxVMBars bounds the ranking plot; the table lists every VM.
const maxVMBars = 15

// vmRanking draws the share of time each VM's vCPUs waited for a CPU,
// most interfered with on top.
func vmRanking(vms []report.VM) (*chart, error) {
	n := min(len(vms), maxVMBars)
	if n == 0 {
		return nil, nil
	}
	p := newPlot("Time vCPUs waited for a CPU", "% of wall time (mean over vCPUs; tick: worst vCPU)", "")
	vals := make(plotter.Values, n)
	worst := make(plotter.XYs, n)
	names := make([]string, n)
	for i := range n {
		v := vms[n-1-i] // bottom to top
		vals[i] = v.StealPct
		worst[i] = plotter.XY{X: v.MaxStealPct, Y: float64(i)}
		names[i] = fmt.Sprintf("%s (%s)", v.Name, v.Recommendation.Action)
	}
	bc, err := plotter.NewBarChart(vals, vg.Points(math.Min(14, 200/float64(n))))
	if err != nil {
		return nil, err
	}
	bc.Horizontal = true
	bc.Color = plotutil.Color(0)
	bc.LineStyle.Width = 0
	p.Add(bc)
	sc, err := plotter.NewScatter(worst)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Shape = draw.BoxGlyph{}
	sc.GlyphStyle.Color = color.Gray{Y: 40}
	p.Add(sc)
	p.NominalY(names...)
	p.X.Min = 0
	p.Y.Tick.Label.XAlign = draw.XRight
	return p, nil
}

// offCPUCDF draws, per agent target, the CDF of its threads' off-CPU
// intervals from the switch timeline: how long a vCPU stays descheduled,
// the "vCPU discontinuity" itself.
func offCPUCDF(traces []report.AgentTrace) (*chart, error) {
	var names []string
	var lines []cdfLine
	for _, t := range traces {
		var v []float64
		for _, e := range t.Events {
			if e.EndNs > e.StartNs {
				v = append(v, e.OffUS())
			}
		}
		if len(v) == 0 {
			continue
		}
		names = append(names, t.Target)
		lines = append(lines, cdfLine{values: v, color: len(lines)})
	}
	if len(lines) == 0 {
		return nil, nil
	}
	p, err := cdf("Off-CPU intervals (agent timelines)", lines)
	if p == nil {
		return nil, err
	}
	p.X.Label.Text = "off-CPU interval, µs (log scale)"
	p.Y.Label.Text = "fraction of intervals ≤ x"
	for i, n := range names {
		p.addLegend(n, lineKey(plotutil.Color(i), vg.Points(1.5), nil))
	}
	return p, nil
}

// agentStripNs is the span of the agent timeline strip: several 4 ms
// ticks and a few slices either side of the longest wait.
const agentStripNs = 100e6

// agentStrip draws one target's threads over agentStripNs around its
// longest wait for a CPU: on CPU, off waiting for a CPU (descheduled: the
// vCPU discontinuity), and off by choice (halted, asleep).
func agentStrip(at report.AgentTrace) (*chart, error) {
	var worst agentapiOff
	found := false
	for _, e := range at.Events {
		if e.Waited && (!found || e.EndNs-e.StartNs > worst.EndNs-worst.StartNs) {
			worst, found = agentapiOff{e.StartNs, e.EndNs}, true
		}
	}
	if !found {
		return nil, nil
	}
	mid := float64(worst.StartNs+worst.EndNs) / 2
	lo, hi := mid-agentStripNs/2, mid+agentStripNs/2
	tids := []uint32{}
	names := map[uint32]string{}
	for _, e := range at.Events {
		if _, ok := names[e.TID]; !ok {
			tids = append(tids, e.TID)
			names[e.TID] = fmt.Sprintf("tid %d", e.TID)
			if e.VCPU >= 0 {
				names[e.TID] = fmt.Sprintf("vcpu%d", e.VCPU)
			}
		}
	}
	slices.Sort(tids)
	p := newPlot("Timeline: "+at.Target, fmt.Sprintf("ms, around its longest wait for a CPU (%s)", report.FormatUS(float64(worst.EndNs-worst.StartNs)/1e3)), "")
	styles := []struct {
		name string
		c    color.Color
	}{{"on CPU", plotutil.Color(1)}, {"waiting for a CPU", plotutil.Color(0)}, {"off by choice", color.Gray{Y: 190}}}
	seg := func(y float64, a, b float64, kind int) error {
		a, b = math.Max(a, lo), math.Min(b, hi)
		if b <= a {
			return nil
		}
		l, err := plotter.NewLine(plotter.XYs{{X: (a - lo) / 1e6, Y: y}, {X: math.Max((b-lo)/1e6, (a-lo)/1e6+0.05), Y: y}})
		if err != nil {
			return err
		}
		l.Color = styles[kind].c
		l.Width = vg.Points(12)
		p.Add(l)
		return nil
	}
	rowNames := make([]string, len(tids))
	for i, tid := range tids {
		y := float64(len(tids) - 1 - i)
		rowNames[len(tids)-1-i] = names[tid]
		for _, e := range at.Events {
			if e.TID != tid {
				continue
			}
			start, end := float64(e.StartNs), float64(e.EndNs)
			if e.RunUS > 0 {
				if err := seg(y, start-e.RunUS*1e3, start, 0); err != nil {
					return nil, err
				}
			}
			kind := 2
			if e.Waited {
				kind = 1
			}
			if err := seg(y, start, end, kind); err != nil {
				return nil, err
			}
		}
	}
	for _, s := range styles {
		p.addLegend(s.name, lineKey(s.c, vg.Points(8), nil))
	}
	p.NominalY(rowNames...)
	p.X.Min, p.X.Max = 0, agentStripNs/1e6
	p.Y.Min, p.Y.Max = -0.6, float64(len(tids))-0.4
	p.Y.Tick.Label.XAlign = draw.XRight
	return p, nil
}

type agentapiOff struct{ StartNs, EndNs uint64 }
