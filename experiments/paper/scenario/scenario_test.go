package scenario

import (
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/results"
)

func TestTableI(t *testing.T) {
	for _, tc := range []struct {
		name              string
		corunner, iso     bool
		vcpus, runnerVCPU int
	}{
		{Shared1, true, false, 16, 16},
		{Shared2, true, true, 32, 32},
		{Baseline, false, false, 64, 32}, // Table I: 8, 16, 32 for 16, 32, 64
		{Baseline, false, false, 1, 1},   // never zero vCPUs
	} {
		s, err := lookup(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if s.Corunner != tc.corunner || s.Isolation != tc.iso || s.RunnerVCPUs(tc.vcpus) != tc.runnerVCPU {
			t.Errorf("%s: %+v, runner vCPUs for %d: %d", tc.name, s, tc.vcpus, s.RunnerVCPUs(tc.vcpus))
		}
	}
	if _, err := lookup("shared3"); err == nil || !strings.Contains(err.Error(), "shared1, shared2, baseline") {
		t.Errorf("unknown scenario: %v", err)
	}
}

func TestScaledVCPUs(t *testing.T) {
	for cpus, want := range map[int][]int{1: {1}, 2: {1, 2}, 4: {1, 2, 4}, 64: {16, 32, 64}, 16: {4, 8, 16}} {
		if got := ScaledVCPUs(cpus); !slices.Equal(got, want) {
			t.Errorf("ScaledVCPUs(%d) = %v, want %v", cpus, got, want)
		}
	}
}

func TestGroupsExpandTheMatrix(t *testing.T) {
	m := Matrix{Scenarios: []string{Shared1, Shared2, Baseline}, Corunner: "while1", Corunners: []int{1, 3}, VCPUs: []int{1, 2}, Modes: []hybridsync.Mode{hybridsync.ModeSpin, hybridsync.ModeBlock}}
	if err := m.Validate(2); err != nil {
		t.Fatal(err)
	}
	gs := m.Groups()
	// Per vCPU count: one baseline group, then shared1 and shared2 with 1
	// and 3 co-runners each.
	if len(gs) != 2*(1+2+2) {
		t.Fatalf("%d groups, want 10", len(gs))
	}
	var got []string
	for _, g := range gs[:5] {
		got = append(got, g.Scenario.Name+"/"+string(rune('0'+g.Corunners)))
	}
	if want := []string{"baseline/0", "shared1/1", "shared1/3", "shared2/1", "shared2/3"}; !slices.Equal(got, want) {
		t.Errorf("group order %v, want %v (baseline first)", got, want)
	}
	keys := m.Keys()
	if len(keys) != 20 {
		t.Fatalf("%d cells, want 20", len(keys))
	}
	seen := map[results.Key]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Errorf("cell %+v twice", k)
		}
		seen[k] = true
		if k.Scenario == Baseline && (k.Corunner != "" || k.Corunners != 0) {
			t.Errorf("baseline cell names a co-runner: %+v", k)
		}
		if k.Scenario != Baseline {
			if k.Corunner != "while1" || k.Corunners == 0 {
				t.Errorf("shared cell without co-runner: %+v", k)
			}
			if !seen[BaselineKey(k)] {
				t.Errorf("cell %+v comes before its baseline", k)
			}
		}
	}
	if g := gs[0]; g.RunnerVCPUs() != 1 || gs[5].RunnerVCPUs() != 1 || gs[6].RunnerVCPUs() != 2 {
		t.Errorf("runner vCPUs: baseline 1v %d, baseline 2v %d, shared1 2v %d", g.RunnerVCPUs(), gs[5].RunnerVCPUs(), gs[6].RunnerVCPUs())
	}
}

func TestBaselineOnlyNeedsNoCorunner(t *testing.T) {
	m := Matrix{Scenarios: []string{Baseline}, VCPUs: []int{2}, Modes: []hybridsync.Mode{hybridsync.ModeBlock}}
	if err := m.Validate(2); err != nil {
		t.Fatal(err)
	}
	if ks := m.Keys(); len(ks) != 1 || ks[0] != (results.Key{Scenario: Baseline, VCPUs: 2, Mode: "block"}) {
		t.Errorf("keys %+v", ks)
	}
}

func TestValidateRejects(t *testing.T) {
	good := Matrix{Scenarios: []string{Shared1, Baseline}, Corunner: "while1", Corunners: []int{1}, VCPUs: []int{1, 2}, Modes: []hybridsync.Mode{hybridsync.ModeSpin}}
	for name, mut := range map[string]func(*Matrix){
		"unknown scenario":   func(m *Matrix) { m.Scenarios = []string{"shared9"} },
		"too many vCPUs":     func(m *Matrix) { m.VCPUs = []int{3} },
		"zero vCPUs":         func(m *Matrix) { m.VCPUs = []int{0} },
		"no co-runner":       func(m *Matrix) { m.Corunner = "" },
		"5 co-runner VMs":    func(m *Matrix) { m.Corunners = []int{5} },
		"no co-runner count": func(m *Matrix) { m.Corunners = nil },
		"no modes":           func(m *Matrix) { m.Modes = nil },
		"duplicate mode":     func(m *Matrix) { m.Modes = []hybridsync.Mode{hybridsync.ModeSpin, hybridsync.ModeSpin} },
		// hybrid is Mode's zero value, which a duplicate must not hide behind.
		"duplicate hybrid":   func(m *Matrix) { m.Modes = []hybridsync.Mode{hybridsync.ModeHybrid, hybridsync.ModeHybrid} },
		"duplicate vCPUs":    func(m *Matrix) { m.VCPUs = []int{1, 1} },
		"duplicate scenario": func(m *Matrix) { m.Scenarios = []string{Shared1, Shared1} },
	} {
		m := good
		mut(&m)
		if err := m.Validate(2); err == nil {
			t.Errorf("%s: accepted %+v", name, m)
		}
	}
	if err := good.Validate(2); err != nil {
		t.Errorf("good matrix rejected: %v", err)
	}
}

func TestFairShare(t *testing.T) {
	if FairShare(2, 1) != 1 || FairShare(1, 3) != 0.25 {
		t.Errorf("FairShare(2,1)=%v FairShare(1,3)=%v", FairShare(2, 1), FairShare(1, 3))
	}
}
