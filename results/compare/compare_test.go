package compare

import (
	"fmt"
	"math"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/results"
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
		if sc != Baseline {
			k.Corunner, k.Corunners = "while1", 1
		}
		cs = append(cs, Cell{Key: k, WallS: wall})
	}
	add(shared1, 1, "spin", 0.391)
	add(shared1, 1, "block", 0.349)
	add(shared1, 1, "hybrid", 0.313)
	add(Baseline, 1, "spin", 0.379)
	add(Baseline, 1, "block", 0.250)
	add(Baseline, 1, "hybrid", 0.218)
	add(Baseline, 2, "spin", 0.100)
	add(Baseline, 2, "block", 0.120)
	add(shared1, 2, "block", 0.150)
	return cs
}

func TestReferenceIsFastestBaselinePerVCPUs(t *testing.T) {
	tb := Build(cells())
	if r := tb.Refs[1]; r.Mode != "hybrid" || r.WallS != 0.218 {
		t.Errorf("1 vCPU reference %+v, want hybrid 0.218", r)
	}
	if r := tb.Refs[2]; r.Mode != "spin" || r.WallS != 0.100 {
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
	tb := Build(cells())
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
	tb := Build(cells())
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
	tb := Build([]Cell{{Key: results.Key{Scenario: shared1, VCPUs: 1, Mode: "spin"}, WallS: 0.3}})
	e, ok := tb.Lookup(results.Key{Scenario: shared1, VCPUs: 1, Mode: "spin"})
	if !ok || e.VsRef != 0 || !e.Fastest || e.String() != "0.300s*" {
		t.Errorf("entry %+v %q: want seconds only, marked", e, e.String())
	}
	if got := tb.References(); got != "none (no baseline cells: seconds only)" {
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
