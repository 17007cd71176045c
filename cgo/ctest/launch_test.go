package ctest

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

var launchNs = regexp.MustCompile(`launch_ns ([0-9.]+)`)

func launchCost(b *testing.B, env []string, prog string) float64 {
	r, err := runErr(env, prog, "100000")
	if err != nil {
		b.Fatalf("%s: %v\n%s", prog, err, r.stderr)
	}
	m := launchNs.FindStringSubmatch(r.stderr)
	if m == nil {
		b.Fatalf("%s: no launch_ns in %q", prog, r.stderr)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// BenchmarkPreloadLaunch measures what the interposer adds to a kernel
// launch (and an event record every 16 launches) on the stand-in driver,
// whose own launch is a few tens of ns: the runtime path (libcudart.so)
// and the driver path (runtime compiled in). The target is well under
// 100 ns per launch. Reported as the ns/launch of each run and their
// difference, interleaved b.N times.
func BenchmarkPreloadLaunch(b *testing.B) {
	if built.err != nil {
		b.Fatal(built.err)
	}
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	for _, prog := range []string{"launchbench_dyn", "launchbench_static"} {
		b.Run(prog, func(b *testing.B) {
			var plain, pre []float64
			for range b.N {
				plain = append(plain, launchCost(b, nil, prog))
				pre = append(pre, launchCost(b, []string{"LD_PRELOAD=" + so}, prog))
			}
			p, q := medianOf(plain), medianOf(pre)
			b.ReportMetric(p, "plain-ns/launch")
			b.ReportMetric(q, "preload-ns/launch")
			b.ReportMetric(q-p, "added-ns/launch")
		})
	}
}

// TestLaunchBenchRuns keeps the benchmark's programs working in CI (no
// timing is checked: performance lives in the benchmark).
func TestLaunchBenchRuns(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	for _, prog := range []string{"launchbench_dyn", "launchbench_static"} {
		for _, env := range [][]string{nil, {"LD_PRELOAD=" + so}} {
			r := run(t, env, prog, "2000")
			if !launchNs.MatchString(r.stderr) {
				t.Errorf("%s %v: no launch_ns in %q", prog, env, r.stderr)
			}
		}
	}
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
