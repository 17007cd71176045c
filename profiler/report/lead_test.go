package report

import (
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// appsFile is runs as a results document of cells by setting and arm,
// each repetition numbered, as apps and advise write it.
func appsFile(runs []apptable.Run) *results.File {
	f := file()
	f.Kind, f.Config.PerStep, f.Config.Workload = results.KindApps, true, "barrier"
	idx := map[results.Key]int{}
	for _, r := range runs {
		base, cpus := apptable.Setting(r.Contention)
		k := results.Key{Program: r.Program, Scenario: base, VCPUs: cpus, Mode: r.Arm}
		if base == "while1" {
			k.Corunner, k.Corunners = "while1", 1
		}
		i, ok := idx[k]
		if !ok {
			i = len(f.Cells)
			idx[k] = i
			f.Cells = append(f.Cells, results.Cell{Key: k})
		}
		f.Cells[i].Reps = append(f.Cells[i].Reps, results.Result{WallS: r.WallS, Rep: r.Rep + 1})
	}
	for i, c := range f.Cells {
		var w []float64
		for _, r := range c.Reps {
			w = append(w, r.WallS)
		}
		f.Cells[i].Median.WallS = stats.Median(w)
	}
	return f
}

// The fastest mode under contention is named by the rule advise decides
// by: on the barrier runs the launcher, settled, as advise
// recommends it; on runs where the leader by median did not beat the
// others in enough repetitions, not settled.
func TestFastestModeSettled(t *testing.T) {
	runs, err := apptable.ReadRuns([]string{"../../results/decide/testdata/issue55-barrier-3.5s-runs.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	v := build(t, Inputs{Results: []ResultsInput{{"r.json", appsFile(runs)}}}).Experiments[0].Verdict
	if v.BestMode != "hybridsync-run" || !v.BestModeSign.Ahead() || !strings.Contains(v.Why, "in 4 of 4 repetitions (settled by the sign test)") {
		t.Errorf("verdict %+v", v)
	}
	var cut []apptable.Run
	for _, r := range runs {
		if r.Rep < 2 {
			cut = append(cut, r)
		}
	}
	v = build(t, Inputs{Results: []ResultsInput{{"r.json", appsFile(cut)}}}).Experiments[0].Verdict
	if v.BestMode != "hybridsync-run" || v.BestModeSign.Ahead() || !strings.Contains(v.Why, "in 2 of 2 repetitions (not settled") {
		t.Errorf("2 repetitions: verdict %+v", v)
	}
}
