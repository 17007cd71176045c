package html

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chart is a plot and its legend. gonum/plot draws a legend inside the
// axes, where it hides curves and bars; a chart's legend is drawn beside
// the axes instead (see svg).
type chart struct {
	*plot.Plot
	legend []legendEntry
}

type legendEntry struct {
	name  string
	thumb plot.Thumbnailer
}

func (c *chart) addLegend(name string, t plot.Thumbnailer) {
	c.legend = append(c.legend, legendEntry{name, t})
}

// Layout, in points of the SVG's own coordinates.
const (
	// margin keeps the text at the edges (the title, the y axis label)
	// inside the SVG: a browser's text box is a little taller than the
	// extent gonum measures.
	margin = vg.Length(4)
	// legendGap separates the legend from the axes.
	legendGap = vg.Length(8)
	// legendShare is the widest the legend may be, as a share of the
	// SVG's width; longer names are shortened (see shorten).
	legendShare = 0.3
	// legendPad separates legend entries.
	legendPad = vg.Length(2)
	// labelGap is the least space between two x tick labels: an em, so
	// that neighbours do not read as one.
	labelGap = vg.Length(10)
	// labelTilt is the angle of x tick labels too wide to lie flat, and
	// tiltedShare the longest such a label may be, as a share of the
	// plot's height.
	labelTilt   = math.Pi / 4
	tiltedShare = 0.4
)

// svg renders c as an inline SVG element (no XML prolog): the plot, its
// legend to the right of the axes in a <g class="legend">, and the
// plotted region as data-area="x0 y0 x1 y1" on the <svg> element (SVG
// units, origin top left), which lets a test or a script tell the data
// from the legend. gonum/plot panics on some degenerate data (a log axis
// over non-positive values); that becomes an error for the figure, never
// a crash of the report.
func svg(c *chart, w, h vg.Length) (s string, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = "", fmt.Errorf("plot %q: %v", c.Title.Text, r)
		}
	}()
	canvas := vgsvg.New(w, h)
	area := draw.Crop(draw.New(canvas), margin, -margin, margin, -margin)
	titleH := vg.Length(0)
	if c.Title.Text != "" {
		titleH = c.Title.TextStyle.Rectangle(c.Title.Text).Size().Y + c.Title.Padding
	}
	leg := c.fitLegend(w*legendShare, area.Size().Y-titleH)
	axes := area
	if leg != nil {
		axes = draw.Crop(area, 0, -(leg.Rectangle(draw.Canvas{}).Size().X + legendGap), 0, 0)
	}
	fitXLabels(c.Plot, axes)
	c.Draw(axes)
	data := c.DataCanvas(axes).Rectangle
	s, err = svgString(canvas)
	if err != nil {
		return "", err
	}
	if leg != nil {
		lc := vgsvg.New(w, h)
		leg.Draw(draw.Canvas{Canvas: lc, Rectangle: vg.Rectangle{
			Min: vg.Point{X: axes.Max.X + legendGap, Y: area.Min.Y},
			Max: vg.Point{X: area.Max.X, Y: area.Max.Y - titleH},
		}})
		ls, err := svgString(lc)
		if err != nil {
			return "", err
		}
		if s, err = spliceLegend(s, ls); err != nil {
			return "", err
		}
	}
	attr := fmt.Sprintf(`<svg data-area="%.2f %.2f %.2f %.2f" `, data.Min.X.Points(), (h - data.Max.Y).Points(), data.Max.X.Points(), (h - data.Min.Y).Points())
	return strings.Replace(s, "<svg ", attr, 1), nil
}

// svgString is what a vgsvg canvas holds, from the <svg> element on.
func svgString(c *vgsvg.Canvas) (string, error) {
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	return s, nil
}

// spliceLegend moves the drawing of legend, an SVG of the same size,
// into a <g class="legend"> inside fig. Both are vgsvg's output: one <g>
// that flips the y axis holds all of the drawing.
func spliceLegend(fig, legend string) (string, error) {
	const flip = `<g transform="scale(1, -1)`
	i := strings.Index(legend, flip)
	j := strings.LastIndex(legend, "</g>")
	k := strings.LastIndex(fig, "</g>")
	if i < 0 || j < i || k < 0 {
		return "", fmt.Errorf("legend: unexpected SVG from vgsvg")
	}
	i += strings.Index(legend[i:], "\n") + 1
	return fig[:k] + `<g class="legend">` + "\n" + legend[i:j] + "</g>\n" + fig[k:], nil
}

// fitLegend lays out c's legend in a column at most maxW wide and height
// tall: names too long are shortened, and entries that do not fit give
// way to a last "+N more". Nil when c has no legend.
func (c *chart) fitLegend(maxW, height vg.Length) *plot.Legend {
	if len(c.legend) == 0 {
		return nil
	}
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = 10
	l.ThumbnailWidth = 16
	l.Padding = legendPad
	entryH := l.TextStyle.Rectangle("Xg").Size().Y + legendPad
	entries := c.legend
	if n := max(1, int((height+legendPad)/entryH)); len(entries) > n {
		entries = entries[:n-1]
	}
	textW := maxW - l.ThumbnailWidth - l.TextStyle.Width(" ")
	for _, e := range entries {
		l.Add(shorten(l.TextStyle.Width, e.name, textW), e.thumb)
	}
	if n := len(c.legend) - len(entries); n > 0 {
		l.Add(fmt.Sprintf("+%d more", n))
	}
	return &l
}

// shorten cuts runes out of the middle of s, where an ellipsis stands
// for them, until width says it fits in maxW: names differ most at
// their ends ("… 12 vCPU", "…-domain-07").
func shorten(width func(string) vg.Length, s string, maxW vg.Length) string {
	r := []rune(s)
	for cut := 1; cut < len(r) && width(s) > maxW; cut++ {
		head := (len(r) - cut) / 2
		s = string(r[:head]) + "…" + string(r[head+cut:])
	}
	return s
}

// fitXLabels keeps a nominal x axis's labels (bar groups) from running
// into each other: they lie flat, on several lines, while they fit
// beside each other; otherwise each becomes one line, shortened to
// tiltedShare of the plot's height, tilted down to the right (so that
// gonum's padding keeps the last one inside the axes), and if even
// tilted they would touch, only every k-th is shown (the page's tables
// name every setting).
func fitXLabels(p *plot.Plot, axes draw.Canvas) {
	ticks, ok := p.X.Tick.Marker.(plot.ConstantTicks)
	if !ok || len(ticks) == 0 {
		return
	}
	sty := &p.X.Tick.Label
	space := p.DataCanvas(axes).Size().X / vg.Length(len(ticks))
	widest := vg.Length(0)
	for _, t := range ticks {
		widest = max(widest, sty.Rectangle(t.Label).Size().X)
	}
	if widest+labelGap <= space {
		return
	}
	maxW := axes.Size().Y * tiltedShare
	// Tilted, neighbours are space·sin(tilt) apart across the text.
	k := max(1, int(math.Ceil(float64((sty.Height("X")+labelGap/2)/(space*vg.Length(math.Sin(labelTilt)))))))
	out := make(plot.ConstantTicks, len(ticks))
	for i, t := range ticks {
		out[i] = plot.Tick{Value: t.Value}
		if i%k == 0 {
			out[i].Label = shorten(sty.Width, strings.ReplaceAll(t.Label, "\n", " "), maxW)
		}
	}
	p.X.Tick.Marker = out
	sty.Rotation = -labelTilt
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YTop
}
