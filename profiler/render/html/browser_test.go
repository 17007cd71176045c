package html

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/profiler/internal/fixture"
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
const figs = [...document.querySelectorAll("figure")].map(f => {
  const s = f.querySelector("svg");
  if (!s) return {id: f.id, svg: false};
  const r = s.getBoundingClientRect(), b = s.getBBox();
  return {id: f.id, svg: true, w: r.width, h: r.height, bw: b.width, bh: b.height,
    shapes: s.querySelectorAll("path, rect, line, polyline").length, texts: s.querySelectorAll("text").length};
});
const pre = document.createElement("pre"); pre.id = "probe";
pre.textContent = JSON.stringify({figs, errs: __errs, tables: document.querySelectorAll("table").length});
document.body.appendChild(pre);
</script>`

type probeResult struct {
	Figs []struct {
		ID            string
		SVG           bool
		W, H, BW, BH  float64
		Shapes, Texts int
	}
	Errs   []string
	Tables int
}

// TestReportRendersInChromium opens the sample report in headless
// Chromium: every plot must lay out as a non-empty SVG with drawn shapes
// and text, the page must log no console errors, and a screenshot is
// saved as an artifact ($ARTIFACTS, else the test's temp dir).
func TestReportRendersInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s not installed (apt-get install chromium, as .ci/setup-profiler.sh does): the HTML is not checked in a browser", chromiumPath)
	}
	var page bytes.Buffer
	if err := Render(&page, fixture.Report(t)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "report.html")
	if err := os.WriteFile(report, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	probed := strings.Replace(page.String(), "<head>", "<head>"+probeHead, 1)
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
	if len(res.Figs) < 6 {
		t.Errorf("%d figures, want at least 6 (slowdown, GPU util, two CDFs, util over time, timeline strip)", len(res.Figs))
	}
	for _, f := range res.Figs {
		t.Logf("figure %s: %.0fx%.0f px, %d shapes, %d texts", f.ID, f.W, f.H, f.Shapes, f.Texts)
		if !f.SVG || f.W < 100 || f.H < 50 || f.BW <= 0 || f.BH <= 0 || f.Shapes < 5 || f.Texts < 3 {
			t.Errorf("figure %s did not render: %+v", f.ID, f)
		}
	}
	if len(res.Errs) > 0 {
		t.Errorf("errors in the page: %q", res.Errs)
	}
	if res.Tables < 3 {
		t.Errorf("%d tables, want the cells, Table II and the VMs", res.Tables)
	}

	// The screenshot, of the report as shipped (no probe), with the
	// browser's console on stderr.
	art := os.Getenv("ARTIFACTS")
	if art == "" {
		art = dir
	}
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(art, "profiler-report.png")
	_, stderr := chromium(t, "--window-size=1280,2400", "--enable-logging=stderr", "--v=0", "--screenshot="+shot, "file://"+report)
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
