package ctest

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

var (
	launchNs = regexp.MustCompile(`launch_ns ([0-9.]+)`)
	stepNs   = regexp.MustCompile(`step_ns ([0-9.]+)`)
)

// measure runs prog with args and returns the number re finds on stderr.
func measure(b *testing.B, env []string, re *regexp.Regexp, prog string, args ...string) float64 {
	r, err := runErr(env, prog, args...)
	if err != nil {
		b.Fatalf("%s: %v\n%s", prog, err, r.stderr)
	}
	m := re.FindStringSubmatch(r.stderr)
	if m == nil {
		b.Fatalf("%s: no %s in %q", prog, re, r.stderr)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func launchCost(b *testing.B, env []string, prog string) float64 {
	return measure(b, env, launchNs, prog, "100000")
}

// BenchmarkPreloadStep measures what the library adds to a step of 8
// short kernels, each after 8 µs of host work, and one stream synchronize
// that finds the last one running (the shape of the CuPy and PyTorch
// programs of experiments/apps), on the stand-in driver: ns per step with
// and without LD_PRELOAD, interleaved b.N times, and the difference.
func BenchmarkPreloadStep(b *testing.B) {
	if built.err != nil {
		b.Fatal(built.err)
	}
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	var plain, pre []float64
	for range b.N {
		plain = append(plain, measure(b, nil, stepNs, "stepbench", "2000"))
		pre = append(pre, measure(b, []string{"LD_PRELOAD=" + so}, stepNs, "stepbench", "2000"))
	}
	p, q := medianOf(plain), medianOf(pre)
	b.ReportMetric(p, "plain-ns/step")
	b.ReportMetric(q, "preload-ns/step")
	b.ReportMetric(q-p, "added-ns/step")
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
	for _, env := range [][]string{nil, {"LD_PRELOAD=" + so}} {
		if r := run(t, env, "stepbench", "50"); !stepNs.MatchString(r.stderr) {
			t.Errorf("stepbench %v: no step_ns in %q", env, r.stderr)
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

// BenchmarkLauncherStart is what hybridsync-run adds to a program's start
// and exit (/bin/true): its default, which applies the settings make
// recorded, and a start that asks the library (HYBRIDSYNC_OPENMP set),
// which loads it once more; each against the plain start, rotated in
// every iteration, medians.
func BenchmarkLauncherStart(b *testing.B) {
	if built.err != nil {
		b.Fatal(built.err)
	}
	arms := []struct {
		name string
		argv []string
	}{
		{"plain", []string{"/bin/true"}},
		{"default", []string{launcher(), "/bin/true"}},
		{"asks", []string{"env", "HYBRIDSYNC_OPENMP=auto", launcher(), "/bin/true"}},
	}
	ns := make([][]float64, len(arms))
	for range b.N {
		for i, a := range arms {
			start := time.Now()
			if out, err := exec.Command(a.argv[0], a.argv[1:]...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %v\n%s", a.argv, err, out)
			}
			ns[i] = append(ns[i], float64(time.Since(start).Nanoseconds()))
		}
	}
	plain := medianOf(ns[0])
	b.ReportMetric(plain, "plain-ns/start")
	for i, a := range arms[1:] {
		b.ReportMetric(medianOf(ns[i+1])-plain, a.name+"-added-ns/start")
	}
}
