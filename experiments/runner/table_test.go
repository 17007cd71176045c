package runner

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/experiments/scenario"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// TestPrintTable: every cell shows its seconds and its slowdown against
// the fastest baseline of its vCPU count (not its own mode's baseline),
// and the fastest mode of each row is marked.
func TestPrintTable(t *testing.T) {
	f := &results.File{Config: results.Config{Backend: "local", Workload: "namd-like", Device: "sim", Reps: 3, Notes: []string{"shared2 skipped: test"}}}
	add := func(sc string, co int, mode string, wall, slow float64) {
		k := results.Key{Scenario: sc, Corunners: co, VCPUs: 1, Mode: mode}
		if co > 0 {
			k.Corunner = "while1"
		}
		c := results.Cell{Key: k, Slowdown: slow, RunnerVCPUs: 1}
		c.Median.WallS = wall
		f.Cells = append(f.Cells, c)
	}
	// As measured once: spin's own slowdown (1.03x) looked best, yet spin
	// was the slowest mode in shared1.
	add(scenario.Shared1, 1, "spin", 0.391, 0.391/0.379)
	add(scenario.Shared1, 1, "block", 0.349, 0.349/0.250)
	add(scenario.Shared1, 1, "hybrid", 0.313, 0.313/0.218)
	add(scenario.Baseline, 0, "spin", 0.379, 1)
	add(scenario.Baseline, 0, "block", 0.250, 1)
	add(scenario.Baseline, 0, "hybrid", 0.218, 1)
	var b bytes.Buffer
	if err := PrintTable(&b, f); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	row := func(prefix string) (int, string) {
		for i, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, prefix) {
				return i, l
			}
		}
		t.Fatalf("no %s row:\n%s", prefix, out)
		return 0, ""
	}
	bi, base := row("baseline")
	si, shared := row("shared1")
	if bi > si {
		t.Errorf("want the baseline row first:\n%s", out)
	}
	for _, want := range []string{"0.379s 1.74x", "0.250s 1.15x", "0.218s 1.00x*", "1 (runner 1)"} {
		if !strings.Contains(base, want) {
			t.Errorf("baseline row %q lacks %q", base, want)
		}
	}
	for _, want := range []string{"0.391s 1.79x", "0.349s 1.60x", "0.313s 1.44x*", "1 x while1"} {
		if !strings.Contains(shared, want) {
			t.Errorf("shared1 row %q lacks %q", shared, want)
		}
	}
	if strings.Count(shared, "*") != 1 || strings.Contains(out, "1.03x") {
		t.Errorf("shared1 row %q: want one mark and no per-mode ratio", shared)
	}
	if !strings.Contains(out, "reference 1 vCPUs: hybrid 0.218s") {
		t.Errorf("the reference is not named:\n%s", out)
	}
	if !strings.Contains(out, "note: shared2 skipped: test") {
		t.Errorf("note missing:\n%s", out)
	}
}
