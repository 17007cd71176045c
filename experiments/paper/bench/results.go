package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// ResultsFile is rows as the results document that run and apps write
// too and `vgpu-probe report` reads: a cell per contention setting,
// threshold and mode, on the one CPU (a 1-vCPU "VM"), against the cells
// of the setting none. profile names the kernel profile ("" for one
// kernel of o.Profile's); interrupted notes that the run was cut short.
func ResultsFile(o Options, profile, mitigation string, rows []Row, interrupted bool) *results.File {
	var modes []string
	for _, m := range o.Modes {
		modes = append(modes, m.String())
	}
	f := &results.File{Version: results.Version, Kind: results.KindBench, Created: time.Now().UTC(), Machine: results.ThisMachine(),
		Config: results.Config{Backend: "local", Scenarios: o.Contentions, Corunner: "while1", Corunners: []int{1}, VCPUs: []int{1},
			Modes: modes, Device: o.Device, Workload: "namd-like", Reps: o.Reps, Steps: o.Steps,
			HostUS: float64(o.HostWork) / float64(time.Microsecond), Profile: profile, PeriodUS: o.CapPeriod.Microseconds(),
			Hints: hasHints(o.Thresholds), Mitigate: mitigation}}
	if k := o.Profile.Kernels; len(k) == 1 {
		f.Config.KernelUS = float64(k[0].Duration) / float64(time.Microsecond)
	}
	f.Config.Notes = append(f.Config.Notes, fmt.Sprintf("cap settings: a CPU quota of %v per %v", o.CapQuota, o.CapPeriod))
	if interrupted {
		f.Config.Notes = append(f.Config.Notes, fmt.Sprintf("interrupted: %d of %d cells finished", len(rows), o.Cells()))
	}
	for _, r := range rows {
		k := results.Key{Scenario: r.Contention, VCPUs: 1, Mode: r.Mode}
		if strings.HasSuffix(r.Contention, "while1") {
			k.Corunner, k.Corunners = "while1", 1
		}
		if len(o.Thresholds) > 1 || (len(o.Thresholds) == 1 && o.Thresholds[0] != workload.ThresholdGuest) {
			k.Threshold = r.Threshold
		}
		c := results.Cell{Key: k, RunnerVCPUs: 1, Median: results.Result{WallS: r.WallS, CPUS: r.CPUS, Steps: r.Steps,
			ReceiveP50US: r.ReceiveP50US, ReceiveP99US: r.ReceiveP99US, LaunchP50US: r.LaunchP50US, LaunchP99US: r.LaunchP99US}}
		c.MinWallS, c.MaxWallS = r.WallS, r.WallS
		for _, rep := range r.Reps {
			rep.Timeline = nil
			c.Reps = append(c.Reps, rep)
			c.MinWallS, c.MaxWallS = min(c.MinWallS, rep.WallS), max(c.MaxWallS, rep.WallS)
		}
		if r.WallS > 0 {
			c.KernelsPerS = float64(r.Steps) / r.WallS
		}
		f.Cells = append(f.Cells, c)
	}
	f.Bench = &results.BenchPart{Rows: rows, Interrupted: interrupted}
	compare.SetSlowdowns(f)
	return f
}

func hasHints(thresholds []string) bool {
	for _, t := range thresholds {
		if t == workload.ThresholdHints {
			return true
		}
	}
	return false
}
