package openmp

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// OpenMP's waits are the library's waits one level up: a thread at a
// barrier spins (GNU libgomp: GOMP_SPINCOUNT, ~300,000 iterations by
// default; LLVM libomp: KMP_BLOCKTIME, 200 ms), then sleeps. On CPUs of
// its own the long spin is what makes the next parallel region start at
// once; on CPUs shared with a busy neighbour it burns the slice the
// team's other threads, the master first, need. So the setting follows
// the same signal as the CUDA waits: whether the program's CPUs are
// contended, while the program runs (ompfollow.go for libgomp,
// blocktime.go for libomp), by one rule (Decide). libgomp reads its
// setting once, in its constructor, before any preloaded library runs:
// the launcher (hybridsync-run) asks Launch what to give the program
// before it starts it, and applies that as it is.

// Probe is how long Launch watches each CPU under HYBRIDSYNC_OPENMP=live.
const Probe = 100 * time.Millisecond

// openMPContended is the share of a probe's time it waited for its CPU
// (run delay, or steal in a VM) from which the CPU counts as contended:
// well above the few percent a kernel thread's wake-ups cost, well below
// the half that one busy neighbour takes.
const openMPContended = 0.10

// BoundedEnv are the Bounded waits as the launcher gives them.
var BoundedEnv = Bounded.env()

// Marker is the GOMP_SPINCOUNT the launcher starts GNU libgomp with by
// default: next to libgomp's default of 300,000, so that a program the
// library does not follow spins as by default, and unlike any other word
// of libgomp's data, so that the library can find where libgomp keeps it
// (ompfollow.go).
const Marker = 299917

// Verdict is what Launch measured and chose.
type Verdict struct {
	CPUs []int
	// Waited is the largest share of the probe any CPU's thread waited
	// for its CPU (run delay, or steal where larger).
	Waited float64
	// Env are the settings to give the program (NAME=VALUE), which the
	// launcher applies as they are; none on CPUs that are not contended,
	// where the runtime's own long spin is the fastest.
	Env []string
	// Set is HYBRIDSYNC_OPENMP where it chose without measuring.
	Set string
	// Follow: the library follows libgomp's spin while the program runs
	// from Marker, which hybridsync-run starts it with; nothing was
	// measured.
	Follow bool
	// Preload is a library to preload after libhybridsync: LLVM's libomp
	// under HYBRIDSYNC_OPENMP=live, which takes over the GOMP_* entry
	// points of a program built for GNU libgomp (libomp implements
	// them), so that its waits follow the CPUs while it runs (the
	// library adapts libomp's blocktime; libgomp's spin cannot change
	// once it started).
	Preload string
}

func (v Verdict) String() string {
	env := "the runtime's defaults"
	if len(v.Env) > 0 {
		env = strings.Join(v.Env, " ")
	}
	if v.Preload != "" {
		env += ", OpenMP on " + v.Preload
	}
	if v.Set != "" {
		return fmt.Sprintf("HYBRIDSYNC_OPENMP=%s: %s", v.Set, env)
	}
	if v.Follow {
		return "hybridsync-run starts GNU libgomp at a marker spin count that the library follows while the program runs; libomp's blocktime follows the CPUs at its CUDA waits"
	}
	return fmt.Sprintf("CPUs %v waited %.0f%% of a %v probe at most: %s", v.CPUs, 100*v.Waited, Probe, env)
}

// libompCandidates are where distributions install LLVM's libomp, in the
// order looked at: Debian and Ubuntu (multiarch, then LLVM's own tree),
// Fedora, a local build.
var libompCandidates = []string{
	"/usr/lib/*-linux-gnu/libomp.so.5", "/usr/lib/llvm-*/lib/libomp.so.5",
	"/usr/lib64/libomp.so", "/usr/local/lib/libomp.so",
}

// bindingBeforeLibomp says why a libgomp program cannot run on libomp
// with the environment's thread binding: GNU libgomp, loaded with the
// program, applies OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY to the
// main thread in its constructor, and libomp, which starts at the first
// parallel region, then takes that one CPU for all it may use.
// KMP_AFFINITY, libomp's own, binds without libgomp reading it.
func bindingBeforeLibomp(lookup func(string) (string, bool)) error {
	for _, k := range []string{"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"} {
		v, ok := lookup(k)
		if !ok || (k == "OMP_PROC_BIND" && strings.EqualFold(strings.TrimSpace(v), "false")) {
			continue
		}
		return fmt.Errorf("HYBRIDSYNC_OPENMP=live with %s=%s: GNU libgomp binds the main thread to one CPU as it loads, and libomp would then use only that one; bind with KMP_AFFINITY (libomp's own) instead, or use HYBRIDSYNC_OPENMP=auto", k, v)
	}
	return nil
}

// libomp returns the path of LLVM's libomp for HYBRIDSYNC_OPENMP=live:
// p (HYBRIDSYNC_LIBOMP) where set, else the first of libompCandidates
// there is.
func libomp(p string) (string, error) {
	if p != "" {
		fi, err := os.Stat(p)
		switch {
		case !filepath.IsAbs(p) || strings.ContainsAny(p, " \t\n:"):
			return "", fmt.Errorf("%s=%q: want an absolute path without blanks or colons (LD_PRELOAD's separators)", hybridsync.EnvLibomp, p)
		case err != nil:
			return "", fmt.Errorf("%s: %w", hybridsync.EnvLibomp, err)
		case !fi.Mode().IsRegular():
			return "", fmt.Errorf("%s=%s: not a file", hybridsync.EnvLibomp, p)
		}
		return p, nil
	}
	for _, pattern := range libompCandidates {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0], nil
		}
	}
	return "", fmt.Errorf("HYBRIDSYNC_OPENMP=live needs LLVM's libomp, found in none of %s (install libomp5, or set %s)",
		strings.Join(libompCandidates, ", "), hybridsync.EnvLibomp)
}

// Launch returns the OpenMP wait settings for a program started now, as
// c (HYBRIDSYNC_OPENMP, HYBRIDSYNC_LIBOMP, parsed by hybridsync's
// configuration) says; lookup reads the rest of the environment (ok
// false: unset). The launcher applies them as they are. A setting the
// user made wins: with OMP_WAIT_POLICY set nothing is set, and a
// GOMP_SPINCOUNT or KMP_BLOCKTIME that is set (even empty) is left alone.
// By default (auto) nothing is measured: libgomp starts at Marker, which
// the library follows while the program runs, so a start costs no more
// than the library's load; bounded and default give the bounded waits,
// or the runtime's own, for the whole run; only live measures (spinning
// a thread on each CPU this process may run on for Probe), and runs the
// program's OpenMP on LLVM's libomp (Verdict.Preload).
func Launch(c hybridsync.EnvConfig, lookup func(string) (string, bool)) (Verdict, error) {
	_, policy := lookup("OMP_WAIT_POLICY")
	_, spin := lookup("GOMP_SPINCOUNT")
	_, blocktime := lookup("KMP_BLOCKTIME")
	switch {
	case c.OpenMP == "" || c.OpenMP == hybridsync.OpenMPAuto:
		v := Verdict{Follow: true}
		if !policy && !spin {
			v.Env = Waits{Spin: Marker, BlocktimeMS: -1}.env()
		}
		return v, nil
	case policy || (spin && blocktime):
		return Verdict{Set: c.OpenMP}, nil
	}
	v, err := measure(c, lookup)
	if err != nil {
		return v, err
	}
	var env []string
	for _, kv := range v.Env {
		if k, _, _ := strings.Cut(kv, "="); !(k == "GOMP_SPINCOUNT" && spin) && !(k == "KMP_BLOCKTIME" && blocktime) {
			env = append(env, kv)
		}
	}
	v.Env = env
	return v, nil
}

// measure is Launch's choice for bounded, default and live.
func measure(c hybridsync.EnvConfig, lookup func(string) (string, bool)) (Verdict, error) {
	var v Verdict
	switch c.OpenMP {
	case hybridsync.OpenMPBounded:
		return Verdict{Env: BoundedEnv, Set: c.OpenMP}, nil
	case hybridsync.OpenMPDefault:
		return Verdict{Set: c.OpenMP}, nil
	}
	if err := bindingBeforeLibomp(lookup); err != nil {
		return v, err
	}
	p, err := libomp(c.Libomp)
	if err != nil {
		return v, err
	}
	v.Preload = p
	if v.CPUs, err = affinityCPUs(); err != nil {
		return v, err
	}
	if len(v.CPUs) == 0 {
		return v, fmt.Errorf("no CPU in this process's affinity")
	}
	steal0 := readSteal()
	waited := make([]float64, len(v.CPUs))
	errs := make([]error, len(v.CPUs))
	var wg sync.WaitGroup
	for i, c := range v.CPUs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waited[i], errs[i] = probeCPU(c, Probe)
		}()
	}
	wg.Wait()
	steal1 := readSteal()
	for i, c := range v.CPUs {
		if errs[i] != nil {
			return v, errs[i]
		}
		w := waited[i]
		if a, ok := steal0[c]; ok {
			if b, ok := steal1[c]; ok {
				w = max(w, float64(b-a)*signal.TickNs/1e9/Probe.Seconds())
			}
		}
		v.Waited = max(v.Waited, w)
	}
	v.Env = Decide(v.Waited >= openMPContended, Own).env()
	return v, nil
}

// probeCPU spins a thread on cpu for d and returns the share of d it
// waited for the CPU (schedstat's run delay).
func probeCPU(cpu int, d time.Duration) (float64, error) {
	runtime.LockOSThread()
	// Not unlocked: the thread's affinity is changed, so it ends with
	// the goroutine rather than serve others.
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("pinning a probe to CPU %d: %w", cpu, err)
	}
	path := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/schedstat"
	s0, err := signal.ReadSchedstat(path)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for time.Since(start) < d {
	}
	s1, err := signal.ReadSchedstat(path)
	if err != nil {
		return 0, err
	}
	return float64(s1.Delay-s0.Delay) / float64(time.Since(start).Nanoseconds()), nil
}

// readSteal is each CPU's steal time in /proc/stat (clock ticks); none
// where it cannot be read.
func readSteal() map[int]int64 {
	all, _ := signal.ReadCPUTicks()
	out := make(map[int]int64, len(all))
	for _, c := range all {
		out[c.CPU] = c.Steal
	}
	return out
}
