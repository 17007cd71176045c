package html

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/profiler/internal/fixture"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
)

// TestSelfContained: the page must open with no network and run nothing:
// no external references, no scripts, every figure inline.
func TestSelfContained(t *testing.T) {
	var b bytes.Buffer
	if err := Render(&b, fixture.Report(t)); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if m := regexp.MustCompile(`(?i)(src|href)\s*=|@import|url\(|<script|<link`).FindString(page); m != "" {
		t.Errorf("page refers outside itself or runs code: %q", m)
	}
	if n := strings.Count(page, "<figure"); n < 8 || strings.Count(page, "<svg") != n {
		t.Errorf("%d figures, %d inline SVGs", n, strings.Count(page, "<svg"))
	}
}

// TestEscapesInputText: names come from input files (a co-runner command,
// a VM name); they must not become markup.
func TestEscapesInputText(t *testing.T) {
	r := fixture.Report(t)
	r.VMs = append(r.VMs, report.VM{Name: `<img onerror=alert(1)>`, Source: "x", VCPUs: 1,
		Recommendation: report.Recommendation{Action: report.ActionNothing, Why: "<b>why</b>"}})
	r.Experiments[0].Cells[1].Corunner = `"><script>alert(1)</script>`
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<img onerror") || strings.Contains(b.String(), "<script>alert") || strings.Contains(b.String(), "<b>why") {
		t.Error("input text rendered as markup")
	}
}
