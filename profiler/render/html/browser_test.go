package html

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/profiler/internal/fixture"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
)

const chromiumPath = "/usr/bin/chromium"

// chromium runs headless Chromium with the flags that work as root in a
// container, in a profile directory of its own, and returns stdout and
// stderr.
func chromium(t *testing.T, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir(), "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, chromiumPath, append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String(), errb.String()
}

// probe is injected into a copy of the report: it records errors and
// console.error calls from the start, and after load measures every
// figure's SVG as laid out by the browser.
const probeHead = `<script>
window.__errs = [];
addEventListener("error", e => __errs.push(String(e.message)));
const __ce = console.error; console.error = (...a) => { __errs.push(a.join(" ")); __ce(...a); };
</script>`

const probeTail = `<script>
const rect = e => { const q = e.getBoundingClientRect(); return {l: q.left, t: q.top, r: q.right, b: q.bottom}; };
// A text's own box, turned as the text is: its corners on the page,
// along the baseline first, then back across it.
const quad = t => {
  const b = t.getBBox(), m = t.getScreenCTM();
  return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
    .map(([x, y]) => { const p = new DOMPoint(x, y).matrixTransform(m); return [p.x, p.y]; });
};
const figs = [...document.querySelectorAll("figure")].map(f => {
  const s = f.querySelector("svg");
  if (!s) return {id: f.id, svg: false};
  const r = s.getBoundingClientRect(), b = s.getBBox();
  // data-area is the plotted region in viewBox units, origin top left.
  let data = null;
  const a = (s.getAttribute("data-area") || "").split(" ").map(Number);
  if (a.length == 4 && a.every(isFinite)) {
    const vb = s.viewBox.baseVal, kx = r.width / vb.width, ky = r.height / vb.height;
    data = {l: r.left + a[0]*kx, t: r.top + a[1]*ky, r: r.left + a[2]*kx, b: r.top + a[3]*ky};
  }
  const leg = s.querySelector("g.legend");
  return {id: f.id, svg: true, w: r.width, h: r.height, bw: b.width, bh: b.height,
    shapes: s.querySelectorAll("path, rect, line, polyline").length,
    box: rect(s), data, legend: leg ? rect(leg) : null,
    texts: [...s.querySelectorAll("text")].filter(t => t.textContent.trim() != "").map(t => ({s: t.textContent, q: quad(t)}))};
});
const pre = document.createElement("pre"); pre.id = "probe";
pre.textContent = JSON.stringify({figs, errs: __errs, tables: document.querySelectorAll("table").length,
  height: document.documentElement.scrollHeight});
document.body.appendChild(pre);
</script>`

// box is an element's rectangle on the page, in CSS pixels.
type box struct{ L, T, R, B float64 }

// overlap is how far a and b overlap across and down; both are positive
// only when they intersect.
func (a box) overlap(b box) (w, h float64) {
	return min(a.R, b.R) - max(a.L, b.L), min(a.B, b.B) - max(a.T, b.T)
}

func (a box) String() string { return fmt.Sprintf("[%.1f,%.1f]-[%.1f,%.1f]", a.L, a.T, a.R, a.B) }

type probeFigure struct {
	ID           string
	SVG          bool
	W, H, BW, BH float64
	Shapes       int
	Box          box
	Data, Legend *box
	Texts        []probeText
}

// probeText is a text and its box, turned as the text is: corners 0→1
// run along the baseline, 0→3 across it.
type probeText struct {
	S string
	Q [4][2]float64
}

func (t probeText) bounds() box {
	b := box{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
	for _, p := range t.Q {
		b = box{min(b.L, p[0]), min(b.T, p[1]), max(b.R, p[0]), max(b.B, p[1])}
	}
	return b
}

// axes returns unit vectors along and across t's baseline and its
// height across.
func (t probeText) axes() (along, across [2]float64, height float64) {
	unit := func(a, b [2]float64) ([2]float64, float64) {
		d := [2]float64{b[0] - a[0], b[1] - a[1]}
		n := math.Hypot(d[0], d[1])
		if n == 0 {
			return [2]float64{}, 0
		}
		return [2]float64{d[0] / n, d[1] / n}, n
	}
	along, _ = unit(t.Q[0], t.Q[1])
	across, height = unit(t.Q[0], t.Q[3])
	return along, across, height
}

// overlapOn is how far a and b overlap when projected on the unit
// vector v: positive when their shadows on v intersect.
func overlapOn(a, b probeText, v [2]float64) float64 {
	span := func(t probeText) (lo, hi float64) {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, p := range t.Q {
			d := p[0]*v[0] + p[1]*v[1]
			lo, hi = min(lo, d), max(hi, d)
		}
		return lo, hi
	}
	alo, ahi := span(a)
	blo, bhi := span(b)
	return min(ahi, bhi) - max(alo, blo)
}

// collide reports whether two texts overlap or run together: two
// rectangles intersect iff their shadows intersect on each one's two
// axes; here the shadows along each baseline must stay textGap apart
// and those across may share textSlack of the lower text's height.
func collide(a, b probeText) bool {
	ua, na, ha := a.axes()
	ub, nb, hb := b.axes()
	h := min(ha, hb)
	return overlapOn(a, b, ua) > -textGap*h && overlapOn(a, b, ub) > -textGap*h &&
		overlapOn(a, b, na) > textSlack*h && overlapOn(a, b, nb) > textSlack*h
}

type probeResult struct {
	Figs   []probeFigure
	Errs   []string
	Tables int
	Height int // of the page, in CSS pixels
}

// A text's box spans the font's whole ascent and descent, more than
// gonum's line spacing: the lines of one label sit a pixel or two into
// each other without any ink meeting, so boxes may share textSlack of
// their height across. Along a line, texts closer than textGap times
// their height read as one ("while1 2 vCPUwhile1 2 vCPU").
const (
	textSlack = 0.2
	textGap   = 0.8
)

// legibility lists what makes a figure hard to read at a glance: text
// cut off by the SVG's edge, texts drawn over each other (tick labels
// running together, a legend over a title) and a legend over the data.
func legibility(f probeFigure) []string {
	var bad []string
	for _, t := range f.Texts {
		if b := t.bounds(); b.L < f.Box.L-0.5 || b.R > f.Box.R+0.5 || b.T < f.Box.T-0.5 || b.B > f.Box.B+0.5 {
			bad = append(bad, fmt.Sprintf("text %q at %v is cut off by the SVG's edge %v", t.S, b, f.Box))
		}
	}
	for i, a := range f.Texts {
		for _, b := range f.Texts[i+1:] {
			if collide(a, b) {
				bad = append(bad, fmt.Sprintf("texts %q %v and %q %v overlap or run together", a.S, a.bounds(), b.S, b.bounds()))
			}
		}
	}
	if f.Legend != nil && f.Data != nil {
		if w, h := f.Legend.overlap(*f.Data); w > 0 && h > 0 {
			bad = append(bad, fmt.Sprintf("legend %v lies over the data %v", *f.Legend, *f.Data))
		}
	}
	return bad
}

// TestReportRendersInChromium opens the sample report in headless
// Chromium: every plot must lay out as a non-empty SVG with drawn shapes
// and text, legible (see legibility), the page must log no console
// errors, and a full-page screenshot is saved as an artifact
// ($ARTIFACTS, else the test's temp dir).
func TestReportRendersInChromium(t *testing.T) {
	needChromium(t)
	report, res := probe(t, fixture.Report(t))
	if len(res.Figs) < 6 {
		t.Errorf("%d figures, want at least 6 (slowdown, GPU util, two CDFs, util over time, timeline strip)", len(res.Figs))
	}
	// Bars per mode, CDFs, utilisation over time and the VM strip carry
	// a legend; a lost legend group would skip its check.
	if n := checkFigures(t, res.Figs); n < 10 {
		t.Errorf("%d figures with a legend group, want at least 10", n)
	}
	if len(res.Errs) > 0 {
		t.Errorf("errors in the page: %q", res.Errs)
	}
	if res.Tables < 3 {
		t.Errorf("%d tables, want the cells, Table II and the VMs", res.Tables)
	}
	screenshot(t, report, "profiler-report.png", res.Height)
}

// TestCrowdedPlotsStayLegible renders more settings, longer names and
// more targets than the sample has: bar groups' labels must tilt or thin
// out rather than run together, and legends shorten and end in "+N more"
// rather than spill out of the SVG.
func TestCrowdedPlotsStayLegible(t *testing.T) {
	needChromium(t)
	r := fixture.Report(t)
	e := &r.Experiments[0]
	var more []report.Cell
	for _, c := range e.Cells {
		for v := 5; v <= 12; v++ {
			c.VCPUs = v
			if v == 12 && c.Corunner != "" {
				c.Corunner = "stress-ng --cpu 4 --timeout 60s"
			}
			more = append(more, c)
		}
	}
	e.Cells = append(e.Cells, more...)
	for i := range 16 {
		at := r.AgentTraces[0]
		at.Target = fmt.Sprintf("a-rather-long-libvirt-domain-name-%02d", i)
		r.AgentTraces = append(r.AgentTraces, at)
	}
	page, res := probe(t, r)
	checkFigures(t, res.Figs)
	for _, f := range res.Figs {
		if f.ID != "offcpu-cdf" {
			continue
		}
		if !slices.ContainsFunc(f.Texts, func(x probeText) bool { return strings.HasSuffix(x.S, " more") }) {
			t.Errorf("offcpu-cdf: %d targets and no \"+N more\" in the legend", len(r.AgentTraces))
		}
	}
	screenshot(t, page, "profiler-report-crowded.png", res.Height)
}

func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s not installed (apt-get install chromium, as .ci/setup-profiler.sh does): the HTML is not checked in a browser", chromiumPath)
	}
}

// probe renders r, opens it with the probe in Chromium and returns the
// path of the page as rendered (without the probe) and what the probe
// measured.
func probe(t *testing.T, r *report.Report) (string, probeResult) {
	t.Helper()
	var page bytes.Buffer
	if err := Render(&page, r); err != nil {
		t.Fatal(err)
	}
	return probePage(t, page.String())
}

// probePage is probe of a rendered page.
func probePage(t *testing.T, page string) (string, probeResult) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	probed := strings.Replace(page, "<head>", "<head>"+probeHead, 1)
	probed = strings.Replace(probed, "</body>", probeTail+"</body>", 1)
	probePath := filepath.Join(dir, "probe.html")
	if err := os.WriteFile(probePath, []byte(probed), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, _ := chromium(t, "--window-size=1280,1000", "--dump-dom", "file://"+probePath)
	m := regexp.MustCompile(`(?s)<pre id="probe">(.*?)</pre>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the probe did not run; DOM ends %q", dom[max(0, len(dom)-300):])
	}
	var res probeResult
	txt := strings.NewReplacer("&quot;", `"`, "&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(m[1])
	if err := json.Unmarshal([]byte(txt), &res); err != nil {
		t.Fatalf("probe output %q: %v", txt, err)
	}
	return path, res
}

// checkFigures fails the test for each figure that did not render or is
// hard to read, and returns how many figures carry a legend.
func checkFigures(t *testing.T, figs []probeFigure) (legends int) {
	t.Helper()
	for _, f := range figs {
		t.Logf("figure %s: %.0fx%.0f px, %d shapes, %d texts", f.ID, f.W, f.H, f.Shapes, len(f.Texts))
		if !f.SVG || f.W < 100 || f.H < 50 || f.BW <= 0 || f.BH <= 0 || f.Shapes < 5 || len(f.Texts) < 3 {
			t.Errorf("figure %s did not render: %+v", f.ID, f)
			continue
		}
		if f.Data == nil {
			t.Errorf("figure %s: no data-area on its SVG", f.ID)
		}
		if f.Legend != nil {
			legends++
		}
		for _, s := range legibility(f) {
			t.Errorf("figure %s: %s", f.ID, s)
		}
	}
	return legends
}

// screenshot saves a full-page screenshot of the page at path as an
// artifact named name, with the browser's console on stderr, and fails
// the test on console output or a blank page.
func screenshot(t *testing.T, path, name string, height int) {
	t.Helper()
	art := os.Getenv("ARTIFACTS")
	if art == "" {
		art = t.TempDir()
	}
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(art, name)
	size := fmt.Sprintf("--window-size=1280,%d", max(height, 1000))
	_, stderr := chromium(t, size, "--enable-logging=stderr", "--v=0", "--screenshot="+shot, "file://"+path)
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "Uncaught") {
			t.Errorf("browser console: %s", line)
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// A blank page would be one colour; count the pixels that are not
	// background white.
	b := img.Bounds()
	inked := 0
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				inked++
			}
		}
	}
	if b.Dx() != 1280 || inked < 1000 {
		t.Errorf("screenshot %dx%d with %d inked samples: looks blank", b.Dx(), b.Dy(), inked)
	}
	t.Logf("screenshot: %s", shot)
}
