package decide

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// scaled is base times each factor, by repetition.
func scaled(base []float64, f ...float64) Times {
	t := Times{}
	for i, b := range base {
		t[i] = b * f[i%len(f)]
	}
	return t
}

// way is a way alone and beside the busy loop.
func way(arm string, alone, busy Times, failed string) Way {
	return Way{Arm: arm, Times: []Times{alone, busy}, Failed: failed}
}

var runWith = map[string]string{
	"cuda-blocking":  "in CUDA's blocking-sync mode (`LD_PRELOAD=/s/blocksync.so app -n 1`)",
	"hybridsync":     "with `LD_PRELOAD=/l/libhybridsync.so app -n 1`",
	"hybridsync-run": "with `/b/hybridsync-run app -n 1`",
}

// The rule on made-up repetitions: six of a quiet program alone (A/A
// within 1%) and beside its neighbour (A/A within 3%).
func TestDecide(t *testing.T) {
	base := []float64{1, 1, 1, 1, 1, 1}
	alone := Setting{Name: "none", AsIs: scaled(base, 1), Again: scaled(base, 1.005, 0.995)}
	busy := Setting{Name: "while1", AsIs: scaled(base, 2), Again: scaled(base, 2.04, 1.98, 2.02)}
	same := scaled(base, 1.002, 0.998)
	sameBusy := scaled(base, 2.01, 1.99)
	fasterBusy := scaled(base, 1.42, 1.40, 1.44)
	slower := scaled(base, 1.14, 1.13, 1.15)
	for _, tc := range []struct {
		name      string
		ways      []Way
		arm       string
		decided   bool
		lineParts []string
	}{
		{"no way better", []Way{way("cuda-blocking", same, sameBusy, ""), way("hybridsync", same, scaled(base, 1.98, 2.0), "")},
			"", true, []string{"No way is measurably better here than as it is (noise ±1.0% alone, ±3.0% beside a busy loop on its CPU; 6 repetitions)"}},
		{"library better under contention and the same alone", []Way{way("cuda-blocking", same, scaled(base, 2.3), ""), way("hybridsync", same, fasterBusy, "")},
			"hybridsync", true, []string{"Run it with `LD_PRELOAD=/l/libhybridsync.so app -n 1`: 29% faster than as it is beside a busy loop on its CPU [28%, 30%], the same alone (±1.0%) (6 repetitions)"}},
		{"better under contention but worse alone: a trade, said", []Way{way("cuda-blocking", slower, fasterBusy, ""), way("hybridsync", same, sameBusy, "")},
			"", true, []string{"No way is measurably better", "cuda-blocking is 29% faster beside a busy loop on its CPU but 14% slower alone"}},
		{"better under contention, alone open: not yet", []Way{way("hybridsync", scaled(base, 0.96, 1.04, 0.99), fasterBusy, "")},
			"", false, []string{"No way is measurably better", "still open: hybridsync"}},
		{"better alone, the same beside the neighbour", []Way{way("cuda-blocking", scaled(base, 0.87, 0.86, 0.88), sameBusy, "")},
			"cuda-blocking", true, []string{"blocking-sync mode", "13% faster than as it is alone [12%, 14%], the same beside a busy loop on its CPU (±3.0%)"}},
		{"the best of two recommendable ways", []Way{way("hybridsync", same, fasterBusy, ""), way("hybridsync-run", same, scaled(base, 1.1), "")},
			"hybridsync-run", true, []string{"Run it with `/b/hybridsync-run app -n 1`: 45% faster"}},
		{"an open way ahead of a recommendable one", []Way{way("hybridsync", same, fasterBusy, ""), way("hybridsync-run", scaled(base, 0.97, 1.05, 0.99), scaled(base, 1.1), "")},
			"hybridsync", false, []string{"LD_PRELOAD=/l/libhybridsync.so"}},
		{"a way that failed", []Way{way("hybridsync", same, fasterBusy, "exit status 1")},
			"", true, []string{"No way is measurably better"}},
		{"3 wins of 3: too few", []Way{way("hybridsync", scaled(base[:3], 1), scaled(base[:3], 1.4), "")},
			"", false, []string{"still open"}},
		{"the same over 3: too few to be no better", []Way{way("hybridsync", scaled(base[:3], 1), scaled(base[:3], 2), "")},
			"", false, []string{"still open"}},
		{"wins by less than the margin", []Way{way("hybridsync", same, scaled(base, 1.985), "")},
			"", true, []string{"No way is measurably better"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Decide(tc.ways, []Setting{alone, busy})
			if a.Arm != tc.arm || a.Decided != tc.decided {
				t.Errorf("advice %q decided %v, want %q decided %v (%+v)", a.Arm, a.Decided, tc.arm, tc.decided, a.Ways)
			}
			line := a.Line(runWith, 6)
			for _, p := range tc.lineParts {
				if !strings.Contains(line, p) {
					t.Errorf("line %q\nwant %q in it", line, p)
				}
			}
			if strings.Contains(line, "\n") {
				t.Errorf("line %q: more than one line", line)
			}
		})
	}
}

// Without the A/A control a way is compared with one run as it is: it
// needs 6 wins of 6, and nothing is the same.
func TestDecideWithoutAA(t *testing.T) {
	base := []float64{1, 1, 1, 1, 1}
	alone, busy := Setting{Name: "none", AsIs: scaled(base, 1)}, Setting{Name: "while1", AsIs: scaled(base, 2)}
	w := []Way{way("hybridsync", scaled(base, 1), scaled(base, 1.2), "")}
	if a := Decide(w, []Setting{alone, busy}); a.Arm != "" || a.Decided || a.Ways[0].In[1].Is != Open {
		t.Errorf("5 repetitions: %+v", a)
	}
	base = append(base, 1)
	alone, busy = Setting{Name: "none", AsIs: scaled(base, 1)}, Setting{Name: "while1", AsIs: scaled(base, 2)}
	w = []Way{way("hybridsync", scaled(base, 1), scaled(base, 1.2), "")}
	if a := Decide(w, []Setting{alone, busy}); a.Ways[0].In[1].Is != Better || a.Ways[0].In[0].Is != Open || !strings.Contains(a.Line(nil, 6), "noise ±?% alone") {
		t.Errorf("6 repetitions: %+v", a)
	}
}

func TestNoise(t *testing.T) {
	iv := func(lo, hi float64) *Paired { return &Paired{CI: [2]float64{lo, hi}, Level: 0.96, N: 8} }
	for _, tc := range []struct {
		aa            *Paired
		noise, margin float64
	}{
		{iv(0.999, 1.001), MinNoise, MinNoise},
		{iv(0.98, 1.03), 0.05, MinNoise},
		{iv(1.04, 1.06), 0.06, 0.04},
		{iv(0.90, 0.95), 0.10, 0.05},
		{nil, math.Inf(1), MinNoise},
	} {
		if got := Noise(tc.aa); math.Abs(got-tc.noise) > 1e-9 && got != tc.noise {
			t.Errorf("Noise(%v) = %v, want %v", tc.aa, got, tc.noise)
		}
		if got := Margin(tc.aa); math.Abs(got-tc.margin) > 1e-9 {
			t.Errorf("Margin(%v) = %v, want %v", tc.aa, got, tc.margin)
		}
	}
	if got := (&Advice{Noise: []SettingNoise{{"nonex4", 0.02}, {"while1x4-1s", 0.05}}}).Line(nil, 1); !strings.Contains(got, "(noise ±2.0% alone, ±5.0% beside a busy loop on each of its 4 CPUs coming and going (1s on, 1s off); 1 repetition)") {
		t.Errorf("line on 4 CPUs: %q", got)
	}
}

// Runs of advise replayed: the barrier program on a 2-CPU VM
// (its numbers as the issue gives them) and the GPU machine's runs in
// docs/bench. Each must give the advice its own runs support.
func TestReplay(t *testing.T) {
	arms := []string{"cuda-default", "cuda-blocking", "cuda-default-again", "hybridsync", "hybridsync-run"}
	bench := "../../docs/bench/2026-11-29-h200-advise/"
	for _, tc := range []struct {
		file      string
		settings  []string
		arm       string
		decided   bool
		lineParts []string
	}{
		// The launcher faster beside the loops in every repetition, the
		// program as it is with outliers many times its usual time.
		{"testdata/issue55-barrier-3.5s-runs.jsonl", []string{"nonex2", "while1x2"}, "hybridsync-run", true,
			[]string{"Run it with `/b/hybridsync-run app -n 1`: 39% faster than as it is beside a busy loop on each of its 2 CPUs [32%, 86%], the same alone"}},
		// Slower alone (the launcher's probe at start): a trade, said.
		{"testdata/issue55-barrier-0.3s-runs.jsonl", []string{"nonex2", "while1x2"}, "", true,
			[]string{"No way is measurably better", "hybridsync-run is 45% faster beside a busy loop on each of its 2 CPUs but 35% slower alone"}},
		{"testdata/issue55-barrier-1.5s-runs.jsonl", []string{"nonex2", "while1x2"}, "", true,
			[]string{"hybridsync-run is 27% faster beside a busy loop on each of its 2 CPUs but 7.4% slower alone"}},
		{bench + "gromacs-ntomp4-runs.jsonl", []string{"nonex4", "while1x4"}, "hybridsync-run", true, []string{"Run it with `/b/hybridsync-run"}},
		{bench + "gromacs-ntomp4-live-runs.jsonl", []string{"nonex4", "while1x4"}, "hybridsync-run", true, []string{"Run it with `/b/hybridsync-run"}},
		{bench + "torch-train-runs.jsonl", []string{"none", "while1"}, "", false, []string{"No way is measurably better", "still open"}},
		// A 2-CPU VM beside other work (docs/BENCHMARKS.md, "advise on
		// a 2-CPU VM"): the launcher slower alone, no faster beside the
		// loops.
		{"../../docs/bench/2026-12-07-2cpu-advise/barrier-200k-runs.jsonl", []string{"nonex2", "while1x2", "while1x2-1s"}, "", true, []string{"No way is measurably better", "6 repetitions"}},
		// The same VM, a longer run: 3 repetitions, each way within a
		// wide band, are too few to call the launcher no better.
		{"../../docs/bench/2026-12-07-2cpu-advise/barrier-1m-runs.jsonl", []string{"nonex2", "while1x2", "while1x2-1s"}, "", false, []string{"still open: hybridsync-run"}},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			runs, err := apptable.ReadRuns([]string{tc.file})
			if err != nil {
				t.Fatal(err)
			}
			a := FromRuns(runs, arms, tc.settings)
			if a.Arm != tc.arm || a.Decided != tc.decided {
				t.Errorf("advice %q decided %v, want %q decided %v (%+v)", a.Arm, a.Decided, tc.arm, tc.decided, a.Ways)
			}
			line := a.Line(runWith, a.Ways[0].In[0].Paired.N)
			for _, p := range tc.lineParts {
				if !strings.Contains(line, p) {
					t.Errorf("line %q\nwant %q in it", line, p)
				}
			}
		})
	}
}

// docs/experiments.md states the rule in Rule's words.
func TestRuleInDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/experiments.md")
	if err != nil {
		t.Fatal(err)
	}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if !strings.Contains(flat(string(b)), flat(Rule)) {
		t.Error("docs/experiments.md does not quote decide.Rule: give it the rule's text")
	}
}

// With the loops coming and going as a third setting: a way must be
// better in one and better or the same in every other; worse under the
// pattern is a trade, said.
func TestDecidePatterns(t *testing.T) {
	base := []float64{1, 1, 1, 1, 1, 1}
	settings := []Setting{
		{Name: "nonex2", AsIs: scaled(base, 1), Again: scaled(base, 1.005, 0.995)},
		{Name: "while1x2", AsIs: scaled(base, 2), Again: scaled(base, 2.04, 1.98, 2.02)},
		{Name: "while1x2-1s", AsIs: scaled(base, 1.5), Again: scaled(base, 1.53, 1.48, 1.51)},
	}
	same, faster := scaled(base, 1.002, 0.998), scaled(base, 1.4, 1.42)
	a := Decide([]Way{{Arm: "hybridsync-run", Times: []Times{same, faster, scaled(base, 1.5, 1.51, 1.49)}}}, settings)
	if line := a.Line(runWith, 6); a.Arm != "hybridsync-run" || !a.Decided ||
		!strings.Contains(line, "30% faster than as it is beside a busy loop on each of its 2 CPUs [29%, 30%], the same alone (±1.0%), the same beside a busy loop on each of its 2 CPUs coming and going (1s on, 1s off) (±3.3%)") {
		t.Errorf("the same under the pattern: %q %+v", line, a)
	}
	a = Decide([]Way{{Arm: "hybridsync-run", Times: []Times{same, faster, scaled(base, 1.8, 1.81)}}}, settings)
	if line := a.Line(runWith, 6); a.Arm != "" || !strings.Contains(line, "hybridsync-run is 30% faster beside a busy loop on each of its 2 CPUs but 20% slower beside a busy loop on each of its 2 CPUs coming and going (1s on, 1s off)") {
		t.Errorf("slower under the pattern: %q", line)
	}
}
