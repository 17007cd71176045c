// Package scenario is Table I of the paper (Shared1, Shared2, Baseline) and
// the expansion of an experiment's matrix (scenarios x vCPU counts x
// co-runner VMs x wait modes) into the cells the runner measures.
package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// Scenario names, as in Table I.
const (
	Shared1  = "shared1"
	Shared2  = "shared2"
	Baseline = "baseline"
)

// Scenario is one row of Table I.
type Scenario struct {
	Name string
	// Corunner: co-runner VMs share the runner's CPUs.
	Corunner bool
	// Isolation: each VM is limited to a fair share of the CPUs with CPU
	// bandwidth control (cgroup cpu.max / cfs quota, libvirt <cputune>).
	Isolation bool
	// HalfVCPUs: the runner gets half the vCPUs (at least one), alone.
	HalfVCPUs bool
	Doc       string
}

// Table is Table I.
var Table = []Scenario{
	{Name: Shared1, Corunner: true, Doc: results.ScenarioDoc(Shared1)},
	{Name: Shared2, Corunner: true, Isolation: true, Doc: results.ScenarioDoc(Shared2)},
	{Name: Baseline, HalfVCPUs: true, Doc: results.ScenarioDoc(Baseline)},
}

// Names lists the scenario names in Table I's order.
func Names() []string {
	var n []string
	for _, s := range Table {
		n = append(n, s.Name)
	}
	return n
}

// lookup returns the scenario called name.
func lookup(name string) (Scenario, error) {
	for _, s := range Table {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q (want %s)", name, strings.Join(Names(), ", "))
}

// RunnerVCPUs is how many vCPUs the runner has in s for a matrix vCPU
// count of vcpus: Table I's baseline has 8, 16, 32 for 16, 32, 64.
func (s Scenario) RunnerVCPUs(vcpus int) int {
	if s.HalfVCPUs {
		return max(1, vcpus/2)
	}
	return vcpus
}

// PaperVCPUs are the paper's vCPU counts (Fig. 4).
var PaperVCPUs = []int{16, 32, 64}

// ScaledVCPUs scales the paper's 16, 32, 64 vCPUs on a 64-CPU-thread
// host (it had 80) to a machine with cpus CPUs: cpus/4, cpus/2 and cpus,
// at least 1, without repeats. On 2 CPUs that is 1 and 2.
func ScaledVCPUs(cpus int) []int {
	var v []int
	for _, p := range PaperVCPUs {
		n := max(1, cpus*p/64)
		if !slices.Contains(v, n) {
			v = append(v, n)
		}
	}
	return v
}

// MaxCorunners is the most co-runner VMs a matrix may ask for (Fig. 6
// goes to 4).
const MaxCorunners = 4

// Matrix is what an experiment crosses.
type Matrix struct {
	Scenarios []string
	Corunner  string // a built-in kind or the label of a command
	Corunners []int  // co-runner VMs, for the scenarios that have them
	VCPUs     []int
	Modes     []hybridsync.Mode
}

// Validate checks the matrix against a machine with cpus CPUs.
func (m Matrix) Validate(cpus int) error {
	if len(m.Scenarios) == 0 || len(m.VCPUs) == 0 || len(m.Modes) == 0 {
		return fmt.Errorf("want at least one scenario, vCPU count and mode")
	}
	for _, s := range m.Scenarios {
		if _, err := lookup(s); err != nil {
			return err
		}
	}
	if dup, ok := firstDup(m.Scenarios); ok {
		return fmt.Errorf("scenario %s given twice", dup)
	}
	if dup, ok := firstDup(m.Modes); ok {
		return fmt.Errorf("mode %s given twice", dup)
	}
	for _, v := range m.VCPUs {
		if v < 1 || v > cpus {
			return fmt.Errorf("%d vCPUs: want 1 to %d (this machine's CPUs; vCPUs of the runner and co-runners share them)", v, cpus)
		}
	}
	if dup, ok := firstDup(m.VCPUs); ok {
		return fmt.Errorf("vCPU count %d given twice", dup)
	}
	if m.needsCorunner() {
		if m.Corunner == "" {
			return fmt.Errorf("scenarios %v need a co-runner", m.Scenarios)
		}
		if len(m.Corunners) == 0 {
			return fmt.Errorf("want at least one co-runner VM count")
		}
		for _, c := range m.Corunners {
			if c < 1 || c > MaxCorunners {
				return fmt.Errorf("%d co-runner VMs: want 1 to %d", c, MaxCorunners)
			}
		}
		if dup, ok := firstDup(m.Corunners); ok {
			return fmt.Errorf("co-runner VM count %d given twice", dup)
		}
	}
	return nil
}

func firstDup[T comparable](list []T) (T, bool) {
	for i, v := range list {
		if slices.Contains(list[:i], v) {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func (m Matrix) needsCorunner() bool {
	for _, s := range m.Scenarios {
		if sc, _ := lookup(s); sc.Corunner {
			return true
		}
	}
	return false
}

// Group is one configuration of VMs: the cells in it run one after
// another with the same runner and co-runner VMs, which are set up once.
type Group struct {
	Scenario  Scenario
	VCPUs     int // the matrix vCPU count
	Corunners int // co-runner VMs; 0 in the baseline
	Cells     []Cell
}

// Cell is one cell of the matrix: its key in the results, which records
// the mode by name, and the mode it runs with.
type Cell struct {
	Key  results.Key
	Mode hybridsync.Mode
}

// RunnerVCPUs is how many vCPUs the group's runner has.
func (g Group) RunnerVCPUs() int { return g.Scenario.RunnerVCPUs(g.VCPUs) }

// Groups expands the matrix into groups of cells. The baseline has no
// co-runners, so it gets one group per vCPU count, whatever Corunners
// says; its keys name no co-runner. Order: by vCPU count, then
// baseline first (a run cut short still has what slowdowns need), then
// the scenarios as given, then co-runner VMs; modes in the order given.
func (m Matrix) Groups() []Group {
	var gs []Group
	order := slices.Clone(m.Scenarios)
	if i := slices.Index(order, Baseline); i > 0 {
		order = append([]string{Baseline}, slices.Delete(order, i, i+1)...)
	}
	for _, v := range m.VCPUs {
		for _, name := range order {
			sc, err := lookup(name)
			if err != nil {
				continue // Validate reports it
			}
			counts := m.Corunners
			if !sc.Corunner {
				counts = []int{0}
			}
			for _, c := range counts {
				g := Group{Scenario: sc, VCPUs: v, Corunners: c}
				for _, mode := range m.Modes {
					k := results.Key{Scenario: sc.Name, Corunners: c, VCPUs: v, Mode: mode.String()}
					if sc.Corunner {
						k.Corunner = m.Corunner
					}
					g.Cells = append(g.Cells, Cell{Key: k, Mode: mode})
				}
				gs = append(gs, g)
			}
		}
	}
	return gs
}

// Keys is every cell of the matrix, in Groups' order.
func (m Matrix) Keys() []results.Key {
	var ks []results.Key
	for _, g := range m.Groups() {
		for _, c := range g.Cells {
			ks = append(ks, c.Key)
		}
	}
	return ks
}

// BaselineKey is the baseline cell with k's vCPU count and mode, which the
// groups measure before k's (the reference of k's slowdown is the fastest
// baseline cell of the vCPU count: results/compare).
func BaselineKey(k results.Key) results.Key {
	return results.Key{Scenario: Baseline, VCPUs: k.VCPUs, Mode: k.Mode}
}

// FairShare is the CPU bandwidth each VM gets in shared2: the shared CPUs
// divided evenly between the runner and the co-runner VMs.
func FairShare(vcpus, corunners int) float64 {
	return float64(vcpus) / float64(1+corunners)
}
