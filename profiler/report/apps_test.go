package report

import (
	"math"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// TestAppsTables: the runs of apps files of one agent setting make one
// table, paired within each file only (both files' repetition 0 is not
// one repetition); another setting makes a table of its own.
func TestAppsTables(t *testing.T) {
	runsOf := func(agent string, hs ...float64) *results.File {
		f := file()
		f.Kind = results.KindApps
		f.Apps = &apptable.Summary{}
		for i, w := range hs {
			f.Apps.Runs = append(f.Apps.Runs,
				apptable.Run{Program: "p", Contention: "none", Arm: "cuda-default", Rep: i, WallS: 1, Steps: 1, Agent: agent},
				apptable.Run{Program: "p", Contention: "none", Arm: "hybridsync", Rep: i, WallS: w, Steps: 1, Agent: agent},
				apptable.Run{Program: "p", Contention: "none", Arm: "cuda-default-again", Rep: i, WallS: 1.01, Steps: 1, Agent: agent})
		}
		return f
	}
	r, err := Build(Inputs{Results: []ResultsInput{
		{Path: "a", File: runsOf("", 1.1, 1.2)},
		{Path: "b", File: runsOf("hints", 0.5)},
		{Path: "c", File: runsOf("", 1.3)},
		{Path: "d", File: file()}, // no runs: no table
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Apps) != 2 || len(r.Apps[0].Sources) != 2 || r.Apps[1].Agent != "hints" {
		t.Fatalf("tables %+v, want a+c and b", r.Apps)
	}
	row := r.Apps[0].Rows[0]
	if p := row.HSVsDefaultPaired; p == nil || p.N != 3 || math.Abs(p.Median-1.2) > 1e-9 {
		t.Errorf("a+c paired %+v, want the median of 1.1, 1.2, 1.3 over n=3", p)
	}
	if p := row.AAPaired; p == nil || math.Abs(p.Median-1.01) > 1e-9 {
		t.Errorf("A/A %+v, want 1.01", p)
	}
	if p := r.Apps[1].Rows[0].HSVsDefaultPaired; p == nil || p.N != 1 || p.Median != 0.5 {
		t.Errorf("b paired %+v", p)
	}
}
