package apptable

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestForCPUSpeed: each process runs at its own CPU speed, which scales
// its CPU-side work (host_s) and, by the slope, its step; the library's
// arm ran on the slower processes, so its raw median is far behind, while
// at the same speed it is 3% behind cuda-default and the A/A arm level.
func TestForCPUSpeed(t *testing.T) {
	var runs []Run
	for rep := range 8 {
		for i, a := range []struct {
			arm   string
			level float64
		}{{"cuda-default", 1}, {"cuda-default-again", 1}, {"hybridsync", 1.03}} {
			speed := 1 + 0.05*float64((rep+i)%4) // 1-1.15x slower
			if a.arm == "hybridsync" {
				speed += 0.3
			}
			host := 100e-6 * speed
			step := a.level * 300e-6 * math.Pow(speed, 0.7)
			runs = append(runs, Run{Program: "g", Contention: "none", Arm: a.arm, Rep: rep, Steps: 1000, WallS: step * 1000, CPUS: 1, HostS: ptr(host * 1000)})
		}
	}
	runs = append(runs, Run{Program: "g", Contention: "none", Arm: "hybridsync", Rep: 9, Round: 1, Steps: 1, WallS: 1, HostS: ptr(1.0)}) // a round: left out
	got := map[string]Adjusted{}
	for _, a := range ForCPUSpeed(runs) {
		got[a.Arm] = a
	}
	hs, aa := got["hybridsync"], got["cuda-default-again"]
	if hs.N != 8 || math.Abs(hs.VsDefault-1.03) > 1e-9 || math.Abs(hs.Slope-0.7) > 1e-9 || hs.CI[0] > 1.03 || hs.CI[1] < 1.03 {
		t.Errorf("hybridsync %+v, want 3%% behind at slope 0.7 over 8 runs", hs)
	}
	if math.Abs(aa.VsDefault-1) > 1e-9 || hs.StepUS < 1.15*got["cuda-default"].StepUS {
		t.Errorf("A/A %+v, raw hybridsync %.1f against %.1f µs", aa, hs.StepUS, got["cuda-default"].StepUS)
	}
	if ForCPUSpeed(runs[:6]) != nil {
		t.Error("2 repetitions: compared, want nothing below 3 runs an arm")
	}
	var b bytes.Buffer
	PrintAdjusted(&b, ForCPUSpeed(runs))
	if !strings.Contains(b.String(), "hybridsync") || !strings.Contains(b.String(), "+3.0% [") {
		t.Errorf("table:\n%s", b.String())
	}
}

// TestForCPUSpeedNoisy: three arms whose processes run at one of two CPU
// speeds, 1.6x apart, at random, as mdrun does on the GPU machine; one arm
// is 4% slower at the same speed. The comparison finds the 4% with an
// interval that excludes 0, and the A/A arm at 0 with one that includes
// it. The raw medians cannot tell: the speed's spread is ten times the
// effect.
func TestForCPUSpeedNoisy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	effect := map[string]float64{"cuda-default": 0, "cuda-default-again": 0, "hybridsync": 0.04}
	var runs []Run
	for rep := range 16 {
		for _, arm := range []string{"cuda-default", "cuda-default-again", "hybridsync"} {
			speed := 1.0
			if rng.IntN(3) == 0 {
				speed = 1.6
			}
			speed *= 0.97 + 0.06*rng.Float64()
			steps := 6000.0
			host := 90e-6 * speed * steps
			wall := 270e-6 * math.Pow(speed, 0.7) * (1 + effect[arm]) * (0.99 + 0.02*rng.Float64()) * steps
			runs = append(runs, Run{Program: "g", Arm: arm, Contention: "none", Rep: rep, Steps: int(steps), WallS: wall, CPUS: 1, HostS: ptr(host)})
		}
	}
	// A failed run and a run without host_s are left out.
	runs = append(runs, Run{Program: "g", Arm: "hybridsync", Contention: "none", Rep: 99, Steps: 1, WallS: 9, HostS: ptr(1.0), ExitStatus: 1, Error: "exit status 1"},
		Run{Program: "g", Arm: "hybridsync", Contention: "none", Rep: 98, Steps: 1, WallS: 9})
	got := map[string]Adjusted{}
	for _, a := range ForCPUSpeed(runs) {
		if a.N != 16 {
			t.Fatalf("%+v: want 16 runs", a)
		}
		got[a.Arm] = a
	}
	if h := got["hybridsync"]; h.VsDefault < 1.025 || h.VsDefault > 1.055 || h.CI[0] <= 1 {
		t.Errorf("hybridsync %+v, want about +4%% with an interval above 0", h)
	}
	if a := got["cuda-default-again"]; math.Abs(a.VsDefault-1) > 0.015 || a.CI[0] > 1 || a.CI[1] < 1 {
		t.Errorf("A/A %+v, want about 0 with an interval around it", a)
	}
}
