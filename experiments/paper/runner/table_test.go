package runner

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/scenario"
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
	for _, want := range []string{"0.379s 1.74x", "0.250s 1.15x", "0.218s 1.00x*", "baseline 1 vCPU "} {
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
	if !strings.Contains(out, "reference 1 vCPU: hybrid 0.218s") {
		t.Errorf("the reference is not named:\n%s", out)
	}
	if !strings.Contains(out, "note: shared2 skipped: test") {
		t.Errorf("note missing:\n%s", out)
	}
	// The bottom line: the best mode of each row and its margin; the
	// scenarios named; no warning without repetitions.
	for _, want := range []string{
		"Best mode per setting: baseline 1 vCPU: hybrid, 15% ahead of block; shared1 1 vCPU 1 x while1: hybrid, 12% ahead of block.",
		"baseline = the runner alone", "shared1 = runner and co-runner VMs share the same CPUs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("a warning without repetitions:\n%s", out)
	}
}

// TestPrintTableWarnsOfNoise: a setting whose repetitions disagree by
// more than the margin between its two leading modes is flagged, with
// the figures; one whose repetitions agree is not.
func TestPrintTableWarnsOfNoise(t *testing.T) {
	f := &results.File{Config: results.Config{Backend: "local", Workload: "namd-like", Reps: 3}}
	add := func(sc string, mode string, reps ...float64) {
		k := results.Key{Scenario: sc, VCPUs: 2, Mode: mode}
		if sc != scenario.Baseline {
			k.Corunner, k.Corunners = "while1", 1
		}
		c := results.Cell{Key: k}
		for _, w := range reps {
			c.Reps = append(c.Reps, results.Result{WallS: w})
		}
		c.Median.WallS = reps[1]
		f.Cells = append(f.Cells, c)
	}
	// A baseline repetition twice another: spin leads block by 5%.
	add(scenario.Baseline, "spin", 0.20, 0.21, 0.40)
	add(scenario.Baseline, "block", 0.22, 0.2205, 0.221)
	// shared1: block leads spin by 50%, repetitions within 2%.
	add(scenario.Shared1, "spin", 0.45, 0.45, 0.459)
	add(scenario.Shared1, "block", 0.30, 0.30, 0.301)
	var b bytes.Buffer
	if err := PrintTable(&b, f); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	want := "warning: baseline 2 vCPUs: repetitions of one cell differ by 100% (spin: 0.200s to 0.400s), more than the 5.0% by which spin leads block"
	if !strings.Contains(out, want) {
		t.Errorf("want %q in:\n%s", want, out)
	}
	if strings.Count(out, "warning") != 1 {
		t.Errorf("want one warning (shared1's repetitions agree):\n%s", out)
	}
}
