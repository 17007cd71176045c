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
func TestSettingOrder(t *testing.T) {
	if !slices.Equal(apptable.SettingOrder, corunner.Contentions) {
		t.Errorf("apptable.SettingOrder %v, corunner.Contentions %v", apptable.SettingOrder, corunner.Contentions)
	}
}
