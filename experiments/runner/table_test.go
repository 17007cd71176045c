package runner

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/experiments/results"
	"github.com/vgpu-probe/vgpu-probe/experiments/scenario"
)

func TestPrintTable(t *testing.T) {
	f := &results.File{Config: results.Config{Backend: "local", Workload: "namd-like", Device: "sim", Reps: 3, Notes: []string{"shared2 skipped: test"}}}
	add := func(sc string, co int, mode string, wall, slow float64) {
		k := results.Key{Scenario: sc, Corunners: co, VCPUs: 2, Mode: mode}
		if co > 0 {
			k.Corunner = "while1"
		}
		c := results.Cell{Key: k, Slowdown: slow, RunnerVCPUs: 2}
		if sc == scenario.Baseline {
			c.RunnerVCPUs = 1
		}
		c.Median.WallS = wall
		f.Cells = append(f.Cells, c)
	}
	add(scenario.Shared1, 1, "spin", 0.4, 2)
	add(scenario.Shared1, 1, "block", 0.3, 1.5)
	add(scenario.Baseline, 0, "spin", 0.2, 0)
	add(scenario.Baseline, 0, "block", 0.2, 0)
	var b bytes.Buffer
	if err := PrintTable(&b, f); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	var base, shared int
	for i, l := range lines {
		if strings.HasPrefix(l, "baseline") {
			base = i
			if !strings.Contains(l, "0.200s") || !strings.Contains(l, "runner 1") {
				t.Errorf("baseline row %q", l)
			}
		}
		if strings.HasPrefix(l, "shared1") {
			shared = i
			if !strings.Contains(l, "2.00x") || !strings.Contains(l, "1.50x") || !strings.Contains(l, "1 x while1") {
				t.Errorf("shared1 row %q", l)
			}
		}
	}
	if base == 0 || shared < base {
		t.Errorf("want the baseline row first:\n%s", out)
	}
	if !strings.Contains(out, "note: shared2 skipped: test") {
		t.Errorf("note missing:\n%s", out)
	}
}
