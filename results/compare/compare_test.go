package compare

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/decide"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// cells is a run as measured on 1 vCPU (shared1 with a while1 co-runner)
// where spin's own baseline was the slowest: against it, spin read 1.03x
// and looked best, though it was the slowest mode in shared1.
// shared1 is Table I's first scenario, named as results.Key names it.
const shared1 = "shared1"

func cells() []Cell {
	var cs []Cell
	add := func(sc string, vcpus int, mode string, wall float64) {
		k := results.Key{Scenario: sc, VCPUs: vcpus, Mode: mode}
		if sc != "baseline" {
			k.Corunner, k.Corunners = "while1", 1
		}
		cs = append(cs, Cell{Key: k, WallS: wall})
	}
	add(shared1, 1, "spin", 0.391)
	add(shared1, 1, "block", 0.349)
	add(shared1, 1, "hybrid", 0.313)
	add("baseline", 1, "spin", 0.379)
	add("baseline", 1, "block", 0.250)
	add("baseline", 1, "hybrid", 0.218)
	add("baseline", 2, "spin", 0.100)
	add("baseline", 2, "block", 0.120)
	add(shared1, 2, "block", 0.150)
	return cs
}

func TestReferenceIsFastestBaselinePerVCPUs(t *testing.T) {
	tb := Build(cells(), "baseline")
	if r := tb.Refs[RefKey{VCPUs: 1}]; r.Mode != "hybrid" || r.WallS != 0.218 {
		t.Errorf("1 vCPU reference %+v, want hybrid 0.218", r)
	}
	if r := tb.Refs[RefKey{VCPUs: 2}]; r.Mode != "spin" || r.WallS != 0.100 {
		t.Errorf("2 vCPU reference %+v, want spin 0.100", r)
	}
	spin, _ := tb.Lookup(results.Key{Scenario: shared1, Corunner: "while1", Corunners: 1, VCPUs: 1, Mode: "spin"})
	if math.Abs(spin.VsRef-0.391/0.218) > 1e-9 || spin.WallS != 0.391 {
		t.Errorf("shared1 spin %+v, want 0.391 s at %.3fx", spin, 0.391/0.218)
	}
	block2, _ := tb.Lookup(results.Key{Scenario: shared1, Corunner: "while1", Corunners: 1, VCPUs: 2, Mode: "block"})
	if math.Abs(block2.VsRef-1.5) > 1e-9 {
		t.Errorf("2 vCPU shared1 block %+v: want it against the 2 vCPU reference (1.50x)", block2)
	}
}

func TestFastestMarkedPerRow(t *testing.T) {
	tb := Build(cells(), "baseline")
	fastest := map[string]string{}
	for _, r := range tb.Rows {
		for m, e := range r.Cells {
			if e.Fastest {
				row := fmt.Sprintf("%s%d", r.Key.Scenario, r.Key.VCPUs)
				if prev, dup := fastest[row]; dup {
					t.Errorf("row %s marks both %s and %s", row, prev, m)
				}
				fastest[row] = m
			}
		}
	}
	want := map[string]string{"shared11": "hybrid", "baseline1": "hybrid", "baseline2": "spin", "shared12": "block"}
	for k, m := range want {
		if fastest[k] != m {
			t.Errorf("row %s: fastest %q, want %q", k, fastest[k], m)
		}
	}
}

func TestOrderAndModes(t *testing.T) {
	tb := Build(cells(), "baseline")
	var order []string
	for _, r := range tb.Rows {
		order = append(order, r.Key.Scenario)
	}
	want := []string{"baseline", "shared1", "baseline", "shared1"}
	if len(order) != len(want) || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("rows %v, want %v (by vCPUs, baseline first)", order, want)
	}
	if len(tb.Modes) != 3 || tb.Modes[0] != "spin" || tb.Modes[2] != "hybrid" {
		t.Errorf("modes %v, want in first-seen order", tb.Modes)
	}
}

func TestNoBaseline(t *testing.T) {
	tb := Build([]Cell{{Key: results.Key{Scenario: shared1, VCPUs: 1, Mode: "spin"}, WallS: 0.3}}, "baseline")
	e, ok := tb.Lookup(results.Key{Scenario: shared1, VCPUs: 1, Mode: "spin"})
	if !ok || e.VsRef != 0 || !e.Fastest || e.String() != "0.300s*" {
		t.Errorf("entry %+v %q: want seconds only, marked", e, e.String())
	}
	if got := tb.References(); got != "none (no baseline cells: times only)" {
		t.Errorf("references %q", got)
	}
}

func TestEntryString(t *testing.T) {
	for _, tc := range []struct {
		e    Entry
		want string
	}{
		{Entry{WallS: 0.391, VsRef: 0.391 / 0.218}, "0.391s 1.79x"},
		{Entry{WallS: 0.313, VsRef: 0.313 / 0.218, Fastest: true}, "0.313s 1.44x*"},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
}

// TestFromFilePerProgramAndPerStep: apps' files compare each program with
// its own cells alone, by time per step (a program run for --seconds
// does as many steps as fit, so its wall times match across arms).
func TestFromFilePerProgramAndPerStep(t *testing.T) {
	f := &results.File{Kind: results.KindApps, Config: results.Config{PerStep: true}}
	add := func(prog, sc, arm string, steps ...int) {
		c := results.Cell{Key: results.Key{Program: prog, Scenario: sc, VCPUs: 1, Mode: arm}}
		for _, n := range steps {
			c.Reps = append(c.Reps, results.Result{WallS: 2, Steps: n})
		}
		c.Median = c.Reps[0]
		f.Cells = append(f.Cells, c)
	}
	add("a", "none", "cuda-default", 1000, 1000, 1000)
	add("a", "while1", "cuda-default", 500, 500, 400)
	add("b", "none", "cuda-default", 100, 100, 100)
	add("b", "while1", "cuda-default", 100, 100, 100)
	SetSlowdowns(f)
	want := []float64{1, 2, 1, 1}
	for i, c := range f.Cells {
		if math.Abs(c.Slowdown-want[i]) > 1e-9 {
			t.Errorf("%+v: slowdown %v, want %v", c.Key, c.Slowdown, want[i])
		}
	}
	tb := FromFile(f)
	if got := tb.References(); got != "a: cuda-default 2.00ms, b: cuda-default 20.00ms" {
		t.Errorf("references %q", got)
	}
	if d := tb.Definition(); !strings.Contains(d, "per step") || !strings.Contains(d, "fastest none cell") || !strings.Contains(d, "same program") {
		t.Errorf("definition %q", d)
	}
	e, _ := tb.Lookup(f.Cells[1].Key)
	if e.MinS != 2.0/500 || e.MaxS != 2.0/400 {
		t.Errorf("a while1 spread %v-%v, want 4ms-5ms", e.MinS, e.MaxS)
	}
}

func TestBottomLine(t *testing.T) {
	tb := Build(cells(), "baseline")
	want := "Best mode per setting: baseline 1 vCPU: hybrid, 15% ahead of block; shared1 1 vCPU 1 x while1: hybrid, 12% ahead of block; " +
		"baseline 2 vCPUs: spin, 20% ahead of block; shared1 2 vCPUs 1 x while1: block."
	if got := tb.BottomLine(); got != want {
		t.Errorf("bottom line\n%q, want\n%q", got, want)
	}
	if w := tb.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q without repetitions", w)
	}
}

// The row's best mode is decide.Fastest's over the repetitions, paired
// by number (the rule report's verdict and advise use), and the bottom
// line says whether the sign test settles it: a mode whose median is
// least but which won only some of the repetitions is not settled; one
// that won every one of 6 is.
func TestBottomLineSettled(t *testing.T) {
	k := func(mode string) results.Key {
		return results.Key{Scenario: shared1, VCPUs: 1, Corunner: "while1", Corunners: 1, Mode: mode}
	}
	times := func(x ...float64) decide.Times {
		out := decide.Times{}
		for i, v := range x {
			out[i+1] = v
		}
		return out
	}
	row := func(hybrid, block decide.Times) Row {
		return Build([]Cell{{Key: k("hybrid"), WallS: 1, Times: hybrid}, {Key: k("block"), WallS: 1, Times: block}}, "baseline").Rows[0]
	}
	r := row(times(1, 1, 1, 1, 1, 1), times(2, 2, 2, 2, 2, 2))
	if r.Best != "hybrid" || r.Sign.Wins != 6 || r.Sign.N != 6 || !r.Sign.Ahead() {
		t.Errorf("won all 6: %+v", r)
	}
	// block's median is least, hybrid won the other half by far: ranked
	// by the medians, not settled.
	r = row(times(1, 1, 1, 5, 5, 5), times(2, 2, 2, 1.5, 1.5, 1.5))
	if r.Best != "block" || r.Sign.Ahead() {
		t.Errorf("split: %+v", r)
	}
	tb := Build([]Cell{{Key: k("hybrid"), WallS: 1, Times: times(1, 1, 1, 5, 5, 5)}, {Key: k("block"), WallS: 1, Times: times(2, 2, 2, 1.5, 1.5, 1.5)}}, "baseline")
	if got := tb.BottomLine(); !strings.Contains(got, "block, 71% ahead of hybrid (faster than every other mode in 3 of 6 repetitions: not settled)") {
		t.Errorf("bottom line %q", got)
	}
}

// TestNoisy: a spread wider than the margin is flagged where the leading
// modes' repetitions overlap, not where every repetition of the best beat
// every one of the next.
func TestNoisy(t *testing.T) {
	k := results.Key{Scenario: shared1, Corunner: "while1", Corunners: 1, VCPUs: 1}
	row := func(best, next []float64) Row {
		var cs []Cell
		for m, reps := range map[string][]float64{"hybrid": best, "block": next} {
			k := k
			k.Mode = m
			cs = append(cs, Cell{Key: k, WallS: stats.Median(reps), Reps: reps})
		}
		return Build(cs, "baseline").Rows[0]
	}
	for _, tc := range []struct {
		best, next []float64
		noisy      bool
	}{
		{[]float64{0.10, 0.11, 0.15}, []float64{0.12, 0.12, 0.12}, true},  // 50% spread, 9% margin, overlapping
		{[]float64{0.10, 0.10, 0.15}, []float64{0.16, 0.16, 0.17}, false}, // 50% spread, 60% margin
		{[]float64{0.10, 0.12, 0.15}, []float64{0.16, 0.17, 0.17}, false}, // 50% spread, 42% margin, apart
		{[]float64{0.10, 0.10, 0.10}, []float64{0.101, 0.101, 0.101}, false},
	} {
		r := row(tc.best, tc.next)
		if s, m, noisy := r.Noisy(); noisy != tc.noisy || r.Best != "hybrid" {
			t.Errorf("best %v next %v: best %s, margin %.2f, spread %.2f (%s), noisy %v, want %v", tc.best, tc.next, r.Best, r.Margin, s, m, noisy, tc.noisy)
		}
	}
}

// TestHybridNote: where hybrid is not a setting's best mode, the note
// says by how much and why as far as the run shows: within the spread,
// more waits kept the CPU than the best mode's (the contention signal),
// or no cause recorded; nothing where hybrid is best.
func TestHybridNote(t *testing.T) {
	co := func(vcpus int, mode string, wall float64, reps []float64, waited, spun int) Cell {
		k := results.Key{Scenario: shared1, Corunner: "while1", Corunners: 1, VCPUs: vcpus, Mode: mode}
		return Cell{Key: k, WallS: wall, Reps: reps, Waited: waited, Spun: spun}
	}
	cs := []Cell{
		// 1 vCPU: hybrid 15% behind, its repetitions apart from block's, 12% of its waits on the CPU.
		co(1, "block", 0.40, []float64{0.39, 0.40, 0.41}, 100, 2),
		co(1, Hybrid, 0.46, []float64{0.45, 0.46, 0.47}, 100, 12),
		// 2 vCPUs: 3% behind, the repetitions overlap.
		co(2, "block", 0.40, []float64{0.38, 0.40, 0.45}, 200, 0),
		co(2, Hybrid, 0.412, []float64{0.40, 0.412, 0.42}, 200, 20),
		// 4 vCPUs: behind, apart, no wait kinds.
		co(4, "block", 0.50, []float64{0.49, 0.50}, 0, 0),
		co(4, Hybrid, 0.60, []float64{0.59, 0.61}, 0, 0),
		// 8 vCPUs: hybrid best.
		co(8, "block", 0.70, nil, 0, 0),
		co(8, Hybrid, 0.60, nil, 0, 0),
	}
	note := Build(cs, "baseline").HybridNote()
	for _, want := range []string{
		"behind in 3 of 4 settings",
		"15% behind block in shared1 1 vCPU 1 x while1 (12% of its timeline's waits kept the CPU, 2.0% of block's): it blocks at once only while its contention signal",
		"3.0% behind block in shared1 2 vCPUs 1 x while1: within the spread of the repetitions",
		"20% behind block in shared1 4 vCPUs 1 x while1: a gap this run recorded no cause for",
	} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
	if strings.Contains(note, "8 vCPUs") || strings.Contains(note, ". ") || !strings.HasSuffix(note, ".") {
		t.Errorf("note names a setting hybrid won, or is more than one sentence:\n%s", note)
	}
	if n := Build(cs[6:], "baseline").HybridNote(); n != "" {
		t.Errorf("hybrid best everywhere, note %q", n)
	}
}
