package suite

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// ResultsFile is runs as the results document that run and bench write
// too and `vgpu-probe report` reads: a cell per program, contention
// setting and arm (the cell's "mode"), on the setting's CPUs (a VM of as
// many vCPUs: while1x4 is scenario while1 with 4 vCPUs), each of its good
// runs a repetition. Cells compare by wall time per step
// (results.Config.PerStep), each program against its own cells of the
// setting none on as many vCPUs. Failed runs are left out and counted in
// a note. Its apps part is the runs' table (apptable.Summarized): the
// caller notes the CPU and the output directory. It is dated by the last
// run's start; capQuota and capPeriod, where known (0: not), are noted;
// reps 0 is as many repetitions as the runs number.
func ResultsFile(runs []Run, programs, contentions, arms []string, reps int, capQuota, capPeriod time.Duration, m results.Machine) *results.File {
	if reps == 0 {
		// Runs read back from a file: as many as they number.
		for _, r := range runs {
			reps = max(reps, r.Rep+1)
		}
	}
	var scenarios []string
	var vcpus []int
	for _, c := range contentions {
		s := settingOf(c)
		if !slices.Contains(scenarios, s.scenario()) {
			scenarios = append(scenarios, s.scenario())
		}
		if !slices.Contains(vcpus, s.CPUs) {
			vcpus = append(vcpus, s.CPUs)
		}
	}
	slices.Sort(vcpus)
	f := &results.File{Version: results.Version, Kind: results.KindApps, Machine: m,
		Config: results.Config{Backend: "local", Scenarios: scenarios, Corunner: "while1", Corunners: []int{1}, VCPUs: vcpus,
			Modes: arms, Workload: strings.Join(programs, ", "), Reps: max(1, reps), PerStep: true,
			PeriodUS: capPeriod.Microseconds()}}
	for _, r := range runs {
		if t, err := time.Parse(time.RFC3339Nano, r.Start); err == nil && t.After(f.Created) {
			f.Created = t.UTC()
		}
	}
	if capPeriod > 0 {
		f.Config.Notes = append(f.Config.Notes, fmt.Sprintf("cap settings: a CPU quota of %v per %v", capQuota, capPeriod))
	}
	if a := AgentSettings(runs); len(a) > 0 && a[0] != "" {
		f.Config.Notes = append(f.Config.Notes, "agent: "+strings.Join(a, "; "))
	}
	type key struct{ p, c, a string }
	by := map[key][]Run{}
	failed := 0
	for _, r := range runs {
		if !r.OK() {
			failed++
			continue
		}
		k := key{r.Program, r.Contention, r.Arm}
		by[k] = append(by[k], r)
	}
	if failed > 0 {
		f.Config.Notes = append(f.Config.Notes, fmt.Sprintf("%d of %d runs failed and are left out", failed, len(runs)))
	}
	for _, p := range programs {
		for _, c := range contentions {
			for _, a := range arms {
				rs := by[key{p, c, a}]
				if len(rs) == 0 {
					continue
				}
				s := settingOf(c)
				f.Cells = append(f.Cells, cellOf(results.Key{Program: p, Scenario: s.scenario(), VCPUs: s.CPUs, Mode: a}, rs))
			}
		}
	}
	sum := apptable.Summarized(runs, programs, contentions, arms)
	sum.Reps = reps
	f.Apps = &sum
	compare.SetSlowdowns(f)
	return f
}

// SummaryName is the file beside results.json that holds its apps part
// alone (the table, the failed runs and the runs).
const SummaryName = "summary.json"

// WriteResults writes doc (ResultsFile's) into dir as results.json and
// its apps part as summary.json, each whole or not at all, and returns
// the path of results.json.
func WriteResults(dir string, doc *results.File) (string, error) {
	if err := results.WriteJSON(filepath.Join(dir, SummaryName), doc.Apps); err != nil {
		return "", fmt.Errorf("write summary: %w", err)
	}
	return results.WriteDoc(dir, doc)
}

// cellOf is one cell from its good runs: each a repetition, the median
// field by field.
func cellOf(k results.Key, rs []Run) results.Cell {
	if base, _ := apptable.SplitPattern(k.Scenario); strings.HasSuffix(base, "while1") {
		k.Corunner, k.Corunners = "while1", 1
	}
	c := results.Cell{Key: k, RunnerVCPUs: k.VCPUs}
	var wall, cpu, steps []float64
	for _, r := range rs {
		c.Reps = append(c.Reps, results.Result{WallS: r.WallS, CPUS: r.CPUS, Steps: r.Steps, Rep: r.Rep + 1})
		wall, cpu, steps = append(wall, r.WallS), append(cpu, r.CPUS), append(steps, float64(r.Steps))
	}
	c.Median = results.Result{WallS: stats.Median(wall), CPUS: stats.Median(cpu), Steps: int(stats.Median(steps))}
	c.MinWallS, c.MaxWallS = slices.Min(wall), slices.Max(wall)
	return c
}
