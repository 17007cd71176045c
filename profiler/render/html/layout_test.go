package html

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"gonum.org/v1/plot/vg"

	"github.com/vgpu-probe/vgpu-probe/results"
)

func TestShortenKeepsBothEnds(t *testing.T) {
	width := func(s string) vg.Length { return vg.Length(utf8.RuneCountInString(s)) }
	for _, tc := range []struct {
		in   string
		maxW vg.Length
		want string
	}{
		{"shared1 while1 2 vCPU", 30, "shared1 while1 2 vCPU"},
		{"shared1 stress-ng --cpu 4 12 vCPU", 20, "shared1 s… 4 12 vCPU"},
		{"a-rather-long-libvirt-domain-name-07", 12, "a-rat…ame-07"},
		{"x", 0, "x"},
	} {
		if got := shorten(width, tc.in, tc.maxW); got != tc.want {
			t.Errorf("shorten(%q, %v) = %q, want %q", tc.in, tc.maxW, got, tc.want)
		}
	}
}

func TestRoundUp(t *testing.T) {
	for in, want := range map[float64]float64{0.5: 0.5, 2.99: 3, 3.01: 4, 76: 80, 81: 100, 100: 100, 1.3e6: 1.5e6, 0: 0, -2: -2} {
		if got := roundUp(in); got != want {
			t.Errorf("roundUp(%g) = %g, want %g", in, got, want)
		}
	}
}

func TestSettingLines(t *testing.T) {
	for _, tc := range []struct {
		k    results.Key
		want string
	}{
		{results.Key{Scenario: "baseline", VCPUs: 2}, "baseline\n2 vCPUs"},
		{results.Key{Scenario: "shared1", Corunner: "while1", VCPUs: 4}, "shared1\n4 vCPUs\nwhile1"},
		{results.Key{Scenario: "shared2", Corunner: "while1", Corunners: 2, VCPUs: 12}, "shared2\n12 vCPUs\n2 x while1"},
		{results.Key{Program: "torch", Scenario: "while1x4", Corunner: "while1", Corunners: 1, VCPUs: 4}, "torch while1x4"},
		{results.Key{Scenario: "shared1", Corunner: "stress-ng --cpu 4"}, "shared1\nstress-ng --cpu 4"},
	} {
		if got := settingLines(tc.k); got != tc.want {
			t.Errorf("settingLines(%+v) = %q, want %q", tc.k, got, tc.want)
		}
	}
}

// TestLegendBesideTheData: the legend lands in its own group, right of
// the data area the SVG declares, and entries beyond the height give way
// to "+N more".
func TestLegendBesideTheData(t *testing.T) {
	c := newPlot("t", "x", "y")
	c.X.Min, c.X.Max, c.Y.Min, c.Y.Max = 0, 1, 0, 1
	for i := range 40 {
		c.addLegend(fmt.Sprintf("entry %d", i), lineKey(nil, 1, nil))
	}
	s, err := svg(c, plotW, plotH)
	if err != nil {
		t.Fatal(err)
	}
	var x0, y0, x1, y1 float64
	if _, err := fmt.Sscanf(s, `<svg data-area="%g %g %g %g"`, &x0, &y0, &x1, &y1); err != nil {
		t.Fatalf("no data-area: %v in %.80q", err, s)
	}
	if x1 > plotW.Points()-30 || x0 >= x1 || y0 >= y1 {
		t.Errorf("data area %g,%g-%g,%g leaves no room beside it for the legend", x0, y0, x1, y1)
	}
	leg := s[strings.Index(s, `<g class="legend">`):]
	if !strings.Contains(leg, "entry 0") || !strings.Contains(leg, " more</text>") || strings.Contains(leg, "entry 39") {
		t.Errorf("legend group without its first entry or a \"+N more\": %.300q", leg)
	}
	for _, xs := range strings.Split(leg, `<text x="`)[1:] {
		var x float64
		if _, err := fmt.Sscanf(xs, "%g", &x); err != nil || x < x1 {
			t.Errorf("legend text at x=%g, left of the data area's right edge %g", x, x1)
		}
	}
}
