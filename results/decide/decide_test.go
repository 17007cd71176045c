package decide

import (
	"math"
	"strings"
	"testing"
)

// iv is a paired ratio with its interval, at the level of 6 or more
// repetitions.
func iv(lo, med, hi float64) *Paired {
	return &Paired{Median: med, CI: [2]float64{lo, hi}, Level: 0.96, N: 8}
}

// The decision rule on made-up ratios: the A/A interval sets each
// setting's band, and a way is recommended only when it is better in one
// setting and not worse, nor possibly worse, in the other.
func TestDecide(t *testing.T) {
	quietAA := iv(0.99, 1.0, 1.01)   // noise: its width, 2%
	busyAA := iv(0.97, 1.0, 1.02)    // 5%
	same := iv(0.995, 1.0, 1.005)    // within any band
	faster := iv(0.68, 0.71, 0.74)   // 29% faster
	slower := iv(1.10, 1.14, 1.18)   // 14% slower
	straddle := iv(0.96, 0.99, 1.04) // across an edge of the 2% band
	for _, tc := range []struct {
		name      string
		ways      []Way
		aa, aaC   *Paired
		arm       string
		decided   bool
		lineParts []string
	}{
		{"no way better", []Way{{"cuda-blocking", same, same, ""}, {"hybridsync", same, iv(0.97, 0.99, 1.02), ""}},
			quietAA, busyAA, "", true, []string{"No way is measurably better here than as it is (noise ±2.0% alone, ±5.0% beside a busy neighbour; 8 repetitions)"}},
		{"library better under contention and the same alone", []Way{{"cuda-blocking", same, slower, ""}, {"hybridsync", same, faster, ""}},
			quietAA, busyAA, "hybridsync", true, []string{"Run it with `LD_PRELOAD=/l/libhybridsync.so app -n 1`: 29% faster than as it is beside a busy neighbour [26%, 32%], the same alone (±2.0%) (8 repetitions)"}},
		{"better under contention but worse alone: not recommended", []Way{{"cuda-blocking", slower, faster, ""}, {"hybridsync", same, same, ""}},
			quietAA, busyAA, "", true, []string{"No way is measurably better"}},
		{"better under contention, alone open: not yet", []Way{{"hybridsync", straddle, faster, ""}},
			quietAA, busyAA, "", false, []string{"No way is measurably better", "still open: hybridsync"}},
		{"better alone, the same beside the neighbour", []Way{{"cuda-blocking", iv(0.85, 0.87, 0.9), iv(0.98, 1.0, 1.03), ""}},
			quietAA, busyAA, "cuda-blocking", true, []string{"blocking-sync mode", "13% faster than as it is alone [10%, 15%], the same beside a busy neighbour (±5.0%)"}},
		{"the best of two recommendable ways", []Way{{"hybridsync", same, faster, ""}, {"hybridsync-run", same, iv(0.5, 0.55, 0.6), ""}},
			quietAA, busyAA, "hybridsync-run", true, []string{"Run it with `/b/hybridsync-run app -n 1`: 45% faster"}},
		{"an open way ahead of a recommendable one", []Way{{"hybridsync", same, faster, ""}, {"hybridsync-run", iv(0.97, 0.99, 1.05), iv(0.5, 0.55, 0.6), ""}},
			quietAA, busyAA, "hybridsync", false, []string{"LD_PRELOAD=/l/libhybridsync.so"}},
		{"a way that failed", []Way{{"hybridsync", same, faster, "exit status 1"}},
			quietAA, busyAA, "", true, []string{"No way is measurably better"}},
		{"too few repetitions", []Way{{"hybridsync", &Paired{Median: 0.7, CI: [2]float64{0.69, 0.71}, Level: 0.5, N: 2}, same, ""}},
			quietAA, busyAA, "", false, []string{"still open"}},
		{"no A/A control", []Way{{"hybridsync", same, faster, ""}}, nil, nil, "", false, []string{"noise ±?% alone"}},
		{"an A/A bias widens the band", []Way{{"hybridsync", same, iv(0.94, 0.955, 0.97), ""}},
			quietAA, iv(1.03, 1.04, 1.05), "", false, []string{"±5.0% beside"}},
		{"a bimodal default: a wide A/A interval, a way below all of it", []Way{{"hybridsync-run", same, iv(0.41, 0.54, 0.63), ""}},
			quietAA, iv(0.64, 1.0, 1.35), "hybridsync-run", true, []string{"46% faster than as it is beside a busy neighbour [37%, 59%], the same alone (±2.0%)"}},
		{"below 1 but within what two runs of one arm differ by", []Way{{"hybridsync", same, iv(0.88, 0.92, 0.96), ""}},
			quietAA, iv(0.85, 1.0, 1.15), "", true, []string{"No way is measurably better here than as it is (noise ±2.0% alone, ±30% beside"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Decide(tc.ways, tc.aa, tc.aaC)
			if a.Arm != tc.arm || a.Decided != tc.decided {
				t.Errorf("advice %q decided %v, want %q decided %v (%+v)", a.Arm, a.Decided, tc.arm, tc.decided, a.Ways)
			}
			line := a.Line(map[string]string{
				"cuda-blocking":  "in CUDA's blocking-sync mode (`LD_PRELOAD=/s/blocksync.so app -n 1`)",
				"hybridsync":     "with `LD_PRELOAD=/l/libhybridsync.so app -n 1`",
				"hybridsync-run": "with `/b/hybridsync-run app -n 1`",
			}, 1, 8)
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

func TestNoise(t *testing.T) {
	for _, tc := range []struct {
		aa   *Paired
		want float64
	}{
		{iv(0.999, 1, 1.001), MinNoise},
		{iv(0.98, 1, 1.03), 0.05},
		{iv(1.04, 1.05, 1.06), 0.06},
		{iv(0.90, 0.93, 0.95), 0.10},
		{nil, math.Inf(1)},
	} {
		if got := Noise(tc.aa); math.Abs(got-tc.want) > 1e-9 && got != tc.want {
			t.Errorf("Noise(%v) = %v, want %v", tc.aa, got, tc.want)
		}
	}
	if got := (&Advice{Ways: nil, NoiseAlone: 0.02, NoiseContended: 0.05}).Line(nil, 4, 1); !strings.Contains(got, "on each of its 4 CPUs; 1 repetition)") {
		t.Errorf("line on 4 CPUs: %q", got)
	}
}
