package suite

import (
	"math"
	"slices"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// TestSummarizeSlowdownIsTheReports: the table's ratio of every cell is
// the slowdown the results document (and so `report`) gives it, here
// where blocking is the fastest arm alone.
func TestSummarizeSlowdownIsTheReports(t *testing.T) {
	var runs []Run
	for i, w := range []float64{2.0, 2.2, 1.9} {
		for j, a := range Arms {
			for k, c := range []string{"none", "while1"} {
				wall := w * (1 + 0.1*float64(j)) * (1 + float64(k))
				if a == "cuda-blocking" {
					wall *= 0.8
				}
				runs = append(runs, Run{Program: "p", Contention: c, Arm: a, Rep: i, WallS: wall, CPUS: 1, Steps: 1000 + 10*i})
			}
		}
	}
	contentions := []string{"none", "while1"}
	rows := apptable.Summarize(runs, []string{"p"}, contentions, Arms)
	f := ResultsFile(runs, []string{"p"}, contentions, Arms, 3, 0, 0, results.Machine{})
	for _, row := range rows {
		for _, a := range row.Arms {
			var slow float64
			for _, c := range f.Cells {
				if c.Key.Scenario == row.Contention && c.Key.Mode == a.Arm {
					slow = c.Slowdown
				}
			}
			if !near(a.Ratio, slow) {
				t.Errorf("%s %s: table ratio %v, results slowdown %v", row.Contention, a.Arm, ptrVal(a.Ratio), slow)
			}
		}
	}
}

func ptrVal(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func near(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }

// TestSettingOrder: the table sorts settings in corunner's order.
// Two patterns of one setting (advise's while1x2 and while1x2-1s) are
// two cells of the results document, each named as measured, not one
// cell measured twice.
func TestResultsFilePatterns(t *testing.T) {
	contentions := []string{"nonex2", "while1x2", "while1x2-1s"}
	var runs []Run
	for rep := range 2 {
		for i, c := range contentions {
			runs = append(runs, Run{Program: "p", Contention: c, Arm: "cuda-default", Rep: rep, WallS: float64(1 + i), CPUS: 1})
		}
	}
	f := ResultsFile(runs, []string{"p"}, contentions, []string{"cuda-default"}, 2, 0, 0, results.Machine{})
	want := map[string]float64{"none": 1, "while1": 2, "while1-1s": 3}
	if len(f.Cells) != len(want) {
		t.Fatalf("%d cells, want %d: %+v", len(f.Cells), len(want), f.Cells)
	}
	for _, c := range f.Cells {
		if w, ok := want[c.Scenario]; !ok || c.Median.WallS != w || c.VCPUs != 2 || (c.Scenario != "none" && c.Corunner != "while1") {
			t.Errorf("cell %+v: median %v", c.Key, c.Median.WallS)
		}
	}
	if !slices.Equal(f.Config.Scenarios, []string{"none", "while1", "while1-1s"}) {
		t.Errorf("scenarios %v", f.Config.Scenarios)
	}
}

func TestSettingOrder(t *testing.T) {
	if !slices.Equal(apptable.SettingOrder, corunner.Contentions) {
		t.Errorf("apptable.SettingOrder %v, corunner.Contentions %v", apptable.SettingOrder, corunner.Contentions)
	}
}
