package ctest

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
)

// built is what TestMain built once for every test.
var built struct {
	err    error
	dir    string // stand-in libraries and programs
	prefix string // make install PREFIX
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hybridsync-ctest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	built.dir, built.prefix = dir, filepath.Join(dir, "prefix")
	built.err = build(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func sh(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// build installs the library into dir/prefix through the Makefile, builds
// the CUDA stand-in into dir, and compiles the test programs against both
// the shared and the static library.
func build(dir string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := sh(root, "make", "-s", "-f", "libhybridsync/Makefile.inc", "install", "PREFIX="+built.prefix, "HS_BUILD="+filepath.Join(dir, "build")); err != nil {
		return err
	}
	td := filepath.Join(root, "libhybridsync", "testdata")
	si, pr := filepath.Join(td, "standin"), filepath.Join(td, "programs")
	inc, lib := filepath.Join(built.prefix, "include"), filepath.Join(built.prefix, "lib")
	steps := [][]string{
		{"gcc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", "libcuda.so.1", "-Wl,-soname,libcuda.so.1", filepath.Join(si, "cuda.c"), "-lpthread"},
		{"gcc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", "libcudart.so.13", "-Wl,-soname,libcudart.so.13", filepath.Join(si, "cudart.c"), "-ldl", "-lpthread"},
		{"ln", "-sf", "libcudart.so.13", "libcudart.so"},
		// The public header alone, strictly.
		{"gcc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c", filepath.Join(inc, "hybridsync.h")},
		{"gcc", "-O2", "-Wall", "-Werror", "-I" + inc, "-I" + pr, "-o", "hsapp_so", filepath.Join(pr, "hsapp.c"), "-L" + lib, "-L.", "-lhybridsync", "-lcudart", "-lpthread", "-ldl"},
		{"gcc", "-O2", "-Wall", "-Werror", "-I" + inc, "-I" + pr, "-o", "hsapp_a", filepath.Join(pr, "hsapp.c"), filepath.Join(lib, "libhybridsync.a"), "-L.", "-lcudart", "-lpthread", "-ldl"},
		// The archive in a program with the runtime compiled in, as
		// nvcc links: no CUDA name may collide with libcudart_static's.
		{"gcc", "-O2", "-Wall", "-Werror", "-I" + inc, "-I" + pr, "-o", "hsapp_a_rt", filepath.Join(pr, "hsapp.c"), filepath.Join(si, "cudart.c"), filepath.Join(lib, "libhybridsync.a"), "-lpthread", "-ldl"},
		{"gcc", "-O2", "-Wall", "-Werror", "-rdynamic", "-I" + pr, "-o", "rtapp_dyn", filepath.Join(pr, "rtapp.c"), "-L.", "-lcudart", "-lpthread", "-ldl"},
		// nvcc's default: the runtime compiled into the program, the
		// driver reached through dlopen + cuGetProcAddress.
		{"gcc", "-O2", "-Wall", "-Werror", "-rdynamic", "-I" + pr, "-o", "rtapp_static", filepath.Join(pr, "rtapp.c"), filepath.Join(si, "cudart.c"), "-lpthread", "-ldl"},
		{"gcc", "-O2", "-Wall", "-Werror", "-rdynamic", "-I" + pr, "-o", "launchbench_dyn", filepath.Join(pr, "launchbench.c"), "-L.", "-lcudart", "-lpthread", "-ldl"},
		{"gcc", "-O2", "-Wall", "-Werror", "-rdynamic", "-I" + pr, "-o", "launchbench_static", filepath.Join(pr, "launchbench.c"), filepath.Join(si, "cudart.c"), "-lpthread", "-ldl"},
		{"gcc", "-O2", "-Wall", "-Werror", "-rdynamic", "-I" + pr, "-o", "stepbench", filepath.Join(pr, "stepbench.c"), "-L.", "-lcudart", "-lpthread", "-ldl"},
		// The suite's C harness, experiments/apps/loop.h.
		{"gcc", "-O2", "-Wall", "-Werror", "-I" + pr, "-I" + filepath.Join(root, "experiments", "apps"), "-o", "inprocapp", filepath.Join(pr, "inprocapp.c"), "-L.", "-lcudart", "-lpthread", "-ldl"},
	}
	for _, s := range steps {
		if err := sh(dir, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func need(t *testing.T) {
	t.Helper()
	if built.err != nil {
		t.Fatalf("building the library and test programs: %v", built.err)
	}
}

type result struct {
	stdout, stderr string
	pid            int
}

// run runs a program from the build dir with a clean HYBRIDSYNC_*
// environment plus env, and fails the test if it wrote to stdout (the
// library never does, and the programs do not) or exited non-zero.
func run(t *testing.T, env []string, prog string, args ...string) result {
	t.Helper()
	r, err := runErr(env, prog, args...)
	if err != nil {
		t.Fatalf("%s %v: %v\nstderr:\n%s", prog, args, err, r.stderr)
	}
	if r.stdout != "" {
		t.Fatalf("%s %v wrote to stdout: %q", prog, args, r.stdout)
	}
	return r
}

func runErr(env []string, prog string, args ...string) (result, error) {
	return runWithin(3*time.Minute, env, prog, args...)
}

// runWithin is runErr with the program killed after limit.
func runWithin(limit time.Duration, env []string, prog string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if !strings.Contains(prog, "/") {
		prog = filepath.Join(built.dir, prog)
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HYBRIDSYNC_") && !strings.HasPrefix(kv, "LD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+built.dir+":"+filepath.Join(built.prefix, "lib"))
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if cmd.Process != nil {
		r.pid = cmd.Process.Pid
	}
	return r, err
}

// stats is the part of the stats JSON the tests read.
type stats struct {
	PID     int    `json:"pid"`
	Engaged bool   `json:"engaged"`
	Version int    `json:"version"`
	Mode    string `json:"mode"`
	Calls   uint64 `json:"calls"`
	Ready   uint64 `json:"ready"`
	Blocks  uint64 `json:"blocks"`
	Deleg   uint64 `json:"delegated"`
	Unknown struct {
		Ready uint64 `json:"ready"`
		Deleg uint64 `json:"delegated"`
	} `json:"unknown_kernels"`
	Outcomes *struct {
		Epochs            map[string]uint64  `json:"epochs"`
		Seconds           map[string]float64 `json:"seconds"`
		Explorations      uint64             `json:"explorations"`
		Chosen            map[string]uint64  `json:"chosen"`
		Settled           uint64             `json:"settled"`
		Rates             map[string]float64 `json:"rates"`
		QuietChecks       uint64             `json:"quiet_checks"`
		Reports           uint64             `json:"reports"`
		EventBlocks       uint64             `json:"event_blocks"`
		EventBlockSeconds float64            `json:"event_block_seconds"`
		Team              uint64             `json:"team"`
	} `json:"outcomes"`
	Kernels []struct {
		Name   string  `json:"name"`
		Calls  uint64  `json:"calls"`
		MeanUS float64 `json:"mean_us"`
	} `json:"kernels"`
}

func readStats(t *testing.T, path string) stats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("stats file: %v", err)
	}
	var s stats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("stats file %s: %v\n%s", path, err, b)
	}
	if s.Version != 1 || s.PID <= 0 || !s.Engaged {
		t.Fatalf("stats file %s: version %d pid %d engaged %v", path, s.Version, s.PID, s.Engaged)
	}
	return s
}

// epochSeconds reads the stats file of a run in the default mode and
// returns the time its finished epochs took, all arms together.
func epochSeconds(t *testing.T, path string) float64 {
	t.Helper()
	o := readStats(t, path).Outcomes
	if o == nil {
		t.Fatal("no outcomes in the stats of the default mode")
	}
	var sum float64
	for _, s := range o.Seconds {
		sum += s
	}
	return sum
}

func (s stats) kernel(substr string) (calls uint64, mean float64, ok bool) {
	for _, k := range s.Kernels {
		if strings.Contains(k.Name, substr) {
			calls += k.Calls
			mean = k.MeanUS
			ok = true
		}
	}
	return
}

var links = []string{"hsapp_so", "hsapp_a", "hsapp_a_rt"}

// TestExplicitAPI: the explicit API names kernels and learns their
// timing. A timing is learned only from a wait that saw its kernel finish
// (a spin or a block); on a busy machine every wait may find its kernel
// done or lose its CPU while spinning, which leaves only bounds: a kernel
// with no timing then skips, naming what was measured.
func TestExplicitAPI(t *testing.T) {
	need(t)
	for _, prog := range links {
		t.Run(prog, func(t *testing.T) {
			w := disturbance.Start()
			r := run(t, nil, prog, "basic")
			f := w.Stop()
			i := strings.Index(r.stderr, "STATS ")
			if i < 0 {
				t.Fatalf("no stats in stderr: %q", r.stderr)
			}
			var s stats
			if err := json.Unmarshal([]byte(strings.SplitN(r.stderr[i+6:], "\n", 2)[0]), &s); err != nil {
				t.Fatal(err)
			}
			if s.Mode != "hybrid" || s.PID != r.pid || s.Calls < 40 {
				t.Errorf("stats: mode %q pid %d (want %d) calls %d", s.Mode, s.PID, r.pid, s.Calls)
			}
			calls, mean, ok := s.kernel("step")
			if !ok || calls < 40 {
				t.Errorf("kernel step: calls %d (%v), want 40 or more", calls, ok)
			}
			// Nothing but the program's own line on stderr: the
			// library logs only when HYBRIDSYNC_LOG asks.
			if strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("unexpected stderr: %q", r.stderr)
			}
			if mean <= 0 {
				f.Check(t, 0.05, fmt.Sprintf("kernel step: no timing learned from %d waits of 300 µs kernels", calls))
			}
		})
	}
}

// unengaged reads the stats file of a library that could not start.
func unengaged(t *testing.T, path string) (reason string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("stats file of a library that could not start: %v", err)
	}
	var s struct {
		Engaged *bool  `json:"engaged"`
		Reason  string `json:"reason"`
		PID     int    `json:"pid"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("stats file %s: %v\n%s", path, err, b)
	}
	if s.Engaged == nil || *s.Engaged || s.Reason == "" || s.PID <= 0 {
		t.Fatalf("stats file %s: want engaged false with a reason: %s", path, b)
	}
	return s.Reason
}

func TestNoDriver(t *testing.T) {
	need(t)
	for _, prog := range links {
		t.Run(prog, func(t *testing.T) {
			stats := filepath.Join(t.TempDir(), "stats.json")
			r := run(t, []string{"HYBRIDSYNC_CUDA_LIB=/nonexistent/libcuda.so.1", "HYBRIDSYNC_STATS=" + stats}, prog, "nocuda")
			if r.stderr != "" {
				t.Errorf("stderr without HYBRIDSYNC_LOG: %q", r.stderr)
			}
			if why := unengaged(t, stats); !strings.Contains(why, "cannot load the CUDA driver") {
				t.Errorf("reason %q", why)
			}
			r = run(t, []string{"HYBRIDSYNC_CUDA_LIB=/nonexistent/libcuda.so.1", "HYBRIDSYNC_LOG=info"}, prog, "nocuda")
			if !strings.Contains(r.stderr, "cannot load the CUDA driver /nonexistent/libcuda.so.1") {
				t.Errorf("HYBRIDSYNC_LOG=info: stderr %q", r.stderr)
			}
		})
	}
}

// TestBadConfig: a bad HYBRIDSYNC_* value is a user error: one line on
// stderr at every log level, the default (off) included, linked or
// preloaded, and the stats file says the library is not engaged, and
// why.
func TestBadConfig(t *testing.T) {
	need(t)
	const msg = `HYBRIDSYNC_MODE: bad value "bogus"`
	for _, prog := range links {
		t.Run(prog, func(t *testing.T) {
			for _, env := range [][]string{{"HYBRIDSYNC_MODE=bogus"}, {"HYBRIDSYNC_MODE=bogus", "HYBRIDSYNC_LOG=off"}, {"HYBRIDSYNC_MODE=bogus", "HYBRIDSYNC_LOG=error"}} {
				r := run(t, env, prog, "badconfig")
				if strings.Count(r.stderr, msg) != 1 || !strings.HasPrefix(r.stderr, "hybridsync[") {
					t.Errorf("%v: stderr %q, want one line saying %s", env, r.stderr, msg)
				}
			}
		})
	}
	t.Run("preload", func(t *testing.T) {
		stats := filepath.Join(t.TempDir(), "stats.json")
		so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
		env := []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_MODE=bogus", "HYBRIDSYNC_STATS=" + stats}
		r := run(t, env, "rtapp_dyn", "5", "1")
		if strings.Count(r.stderr, msg) != 1 {
			t.Errorf("no HYBRIDSYNC_LOG: stderr %q, want the bad value said once", r.stderr)
		}
		if why := unengaged(t, stats); !strings.Contains(why, msg) {
			t.Errorf("reason %q", why)
		}
	})
}

func TestThreads(t *testing.T) {
	need(t)
	for _, prog := range links {
		t.Run(prog, func(t *testing.T) {
			for _, mode := range []string{"hybrid", "block", "spin"} {
				run(t, []string{"HYBRIDSYNC_MODE=" + mode}, prog, "threads", "16")
			}
		})
	}
}

func TestFork(t *testing.T) {
	need(t)
	for _, prog := range links {
		t.Run(prog, func(t *testing.T) {
			dir := t.TempDir()
			r := run(t, []string{"HYBRIDSYNC_STATS=" + filepath.Join(dir, "stats-%p.json")}, prog, "fork")
			files, _ := filepath.Glob(filepath.Join(dir, "*"))
			want := filepath.Join(dir, fmt.Sprintf("stats-%d.json", r.pid))
			// Only the parent writes stats: the child's exit leaves no file.
			if len(files) != 1 || files[0] != want {
				t.Fatalf("stats files %v, want only %s", files, want)
			}
			if s := readStats(t, want); s.Calls < 20 {
				t.Errorf("parent's stats: %d calls, want >= 20", s.Calls)
			}
		})
	}
}

func TestOwnSIGALRMHandler(t *testing.T) {
	need(t)
	for _, prog := range links {
		t.Run(prog, func(t *testing.T) { run(t, nil, prog, "sigalrm") })
	}
}

// TestNeverEarlySameCodes is the invariant as a property, through the C
// API: random kernel lengths, failing kernels, invalid handles, unmarked
// launches, every mode; each wait must end no earlier than the stand-in's
// completion time and return what its cudaEventSynchronize returns.
func TestNeverEarlySameCodes(t *testing.T) {
	need(t)
	seed := time.Now().UnixNano() % 1_000_000
	t.Logf("seeds from %d", seed)
	for _, prog := range links {
		for i := range int64(3) {
			s := strconv.FormatInt(seed+i, 10)
			t.Run(prog+"/"+s, func(t *testing.T) { run(t, nil, prog, "property", s, "300") })
		}
	}
}

var counters = regexp.MustCompile(`standin blocking=(\d+) spin=(\d+) queries=(\d+)`)

func standin(t *testing.T, stderr string) (blocking, spin int) {
	b, s, _ := standinAll(t, stderr)
	return b, s
}

// standinAll also returns the driver queries the program's waits made.
func standinAll(t *testing.T, stderr string) (blocking, spin, queries int) {
	t.Helper()
	m := counters.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no stand-in counters in %q", stderr)
	}
	blocking, _ = strconv.Atoi(m[1])
	spin, _ = strconv.Atoi(m[2])
	queries, _ = strconv.Atoi(m[3])
	return blocking, spin, queries
}

// TestPreload runs an unmodified program under LD_PRELOAD: linked against
// libcudart.so (the runtime API is replaced) and with the runtime compiled
// in (only the driver, reached through cuGetProcAddress, can be).
func TestPreload(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	for _, prog := range []string{"rtapp_dyn", "rtapp_static"} {
		t.Run(prog, func(t *testing.T) {
			// Without the library, CUDA's wait busy-waits on plain events.
			r := run(t, nil, prog, "20", "4")
			if b, s := standin(t, r.stderr); s == 0 || b != 0 {
				t.Fatalf("control run: blocking=%d spin=%d, want spinning in CUDA", b, s)
			}
			for _, mode := range []string{"block", "spin", "hybrid", "paper", "yield", "cuda-auto"} {
				path := filepath.Join(t.TempDir(), "stats.json")
				r := run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_MODE=" + mode, "HYBRIDSYNC_STATS=" + path}, prog, "20", "4")
				b, s := standin(t, r.stderr)
				switch mode {
				case "block":
					// Every wait blocked on a shadow blocking-sync event;
					// none spun inside CUDA.
					if b == 0 || s != 0 {
						t.Errorf("%s: blocking=%d spin=%d, want only blocking waits", mode, b, s)
					}
				case "spin", "yield":
					if b != 0 || s != 0 {
						t.Errorf("%s: blocking=%d spin=%d, want the library's own polling", mode, b, s)
					}
				}
				st := readStats(t, path)
				// Every wait is in the stats: through the policy, or, for
				// waits of no known kernel, found done or left to CUDA (the
				// default mode explores CUDA's modes when its CPU looks
				// contended, as a loaded test machine's may, and those
				// arms observe no records).
				if all := st.Calls + st.Unknown.Ready + st.Unknown.Deleg; st.PID != r.pid || st.Mode != mode || all < 80 {
					t.Errorf("%s: stats pid %d (want %d) mode %q calls %d+%d+%d", mode, st.PID, r.pid, st.Mode, st.Calls, st.Unknown.Ready, st.Unknown.Deleg)
				}
				// Kernel identity and launch time came from the
				// interposed launches (named by their host symbol).
				if calls, mean, ok := st.kernel("kernel_a"); !ok || calls == 0 || mean <= 0 {
					t.Errorf("%s: kernel_a: calls %d mean %.1f µs found %v; kernels %+v", mode, calls, mean, ok, st.Kernels)
				}
				if strings.Count(r.stderr, "\n") != 1 {
					t.Errorf("%s: unexpected stderr %q", mode, r.stderr)
				}
			}
		})
	}
}

// TestPreloadHookSwitch: hs_interpose turns the interposer's hooks off
// and on within a process (for measuring what each costs): with none,
// every wait is CUDA's own; with the waits alone, the policy has them
// (block mode: all blocking) but no launch was observed, so it knows no
// kernel by name.
func TestPreloadHookSwitch(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	for _, prog := range []string{"rtapp_dyn", "rtapp_static"} {
		for _, hooks := range []string{"0", "1", "2"} {
			path := filepath.Join(t.TempDir(), "stats.json")
			r := run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_MODE=block", "HYBRIDSYNC_STATS=" + path, "RTAPP_HOOKS=" + hooks}, prog, "20", "4")
			b, s := standin(t, r.stderr)
			if hooks != "2" {
				if b != 0 || s == 0 {
					t.Errorf("%s, hooks %s: blocking=%d spin=%d, want every wait CUDA's own", prog, hooks, b, s)
				}
				continue
			}
			if b == 0 || s != 0 {
				t.Errorf("%s, hooks 2: blocking=%d spin=%d, want only the library's blocking waits", prog, b, s)
			}
			if _, _, ok := readStats(t, path).kernel("kernel_a"); ok {
				t.Errorf("%s, hooks 2: kernel_a known, but no launch was observed", prog)
			}
		}
	}
}

// TestPreloadUnseenRecords: a record the library did not see (inside a
// CUDA graph; here, made with the launch hooks off) must not leave the
// previous record's time in place for the next wait: the kernel would learn
// the time since the first record, growing with every step, and the policy
// sleep for it. Every wait here is on work of at most 500 µs; what the
// library learns must stay within a few times that.
func TestPreloadUnseenRecords(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	for _, prog := range []string{"rtapp_dyn", "rtapp_static"} {
		path := filepath.Join(t.TempDir(), "stats.json")
		run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path, "RTAPP_UNSEEN_RECORDS=1"}, prog, "90", "1")
		st := readStats(t, path)
		for _, k := range st.Kernels {
			if k.MeanUS > 2000 {
				t.Errorf("%s: %s learned %.0f µs for kernels of 200-500 µs: a stale record's time", prog, k.Name, k.MeanUS)
			}
		}
		t.Logf("%s: kernels %+v", prog, st.Kernels)
	}
}

// TestPreloadShortWaitsToCUDA: in the default mode, once a kernel's waits
// are learned to be short, most of them go to CUDA's own wait (which
// busy-waits on the stand-in's plain events) and the policy sees only a
// sample; an explicit mode never delegates. Other work on the machine
// makes the short waits look long now and then (36 of 120 delegated
// beside two busy loops): a miss then skips, naming what was measured.
func TestPreloadShortWaitsToCUDA(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	var misses []string
	w := disturbance.Start()
	for _, mode := range []string{"hybrid", "spin"} {
		path := filepath.Join(t.TempDir(), "stats.json")
		r := run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_MODE=" + mode, "HYBRIDSYNC_STATS=" + path}, "rtapp_dyn", "120", "1", "20000")
		_, spins := standin(t, r.stderr)
		st := readStats(t, path)
		switch {
		case mode == "hybrid" && (st.Deleg < 40 || spins == 0):
			misses = append(misses, fmt.Sprintf("hybrid, 20-50 µs kernels: %d waits delegated, %d spun in CUDA; want most of 120", st.Deleg, spins))
		case mode != "hybrid" && st.Deleg != 0:
			t.Errorf("%s: %d waits delegated, want none", mode, st.Deleg)
		}
	}
	w.Stop().Check(t, 0.05, misses...)
}

// TestPreloadDelegatedWaitIsCUDAsAlone: a wait left to CUDA makes CUDA's
// wait and nothing else, no query before it: 5000 more waits on short
// kernels, all delegated, add few driver queries, where a query each would
// add 5000. (The policy's own polls of the first, undelegated waits vary
// by up to about 1300 between runs on a loaded machine.)
func TestPreloadDelegatedWaitIsCUDAsAlone(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	// The fewest queries of three runs that delegated at least minDeleg
	// waits, of up to six: on a loaded machine the policy's spins in the
	// first waits poll more, and more variably, and a run the machine
	// contended explores the policy's arm on some of the extra waits,
	// which then are not delegated (about one run in ten on a busy
	// 2-CPU machine).
	queries := func(waits string, minDeleg uint64) (q int, d uint64) {
		q, kept := -1, 0
		var most uint64
		for range 6 {
			path := filepath.Join(t.TempDir(), "stats.json")
			r := run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path}, "rtapp_dyn", waits, "1", "20000")
			_, _, n := standinAll(t, r.stderr)
			dn := readStats(t, path).Deleg
			most = max(most, dn)
			if dn < minDeleg {
				continue
			}
			if q < 0 || n < q {
				q, d = n, dn
			}
			if kept++; kept == 3 {
				break
			}
		}
		if q < 0 {
			t.Fatalf("%s waits: at most %d delegated in six runs, want %d or more: the extra waits delegated", waits, most, minDeleg)
		}
		return q, d
	}
	q1, d1 := queries("120", 0)
	q2, d2 := queries("5120", d1+4750)
	if q2-q1 > 2500 {
		t.Errorf("driver queries: %d for 120 waits, %d for 5120 (%d of them delegated): delegated waits query", q1, q2, d2)
	}
}

// TestPreloadLongAgainLeavesCUDA: a kernel whose waits were left to CUDA
// as short goes back through the policy as soon as one of them completes
// long after its launch (the C side times them), not some waits later.
func TestPreloadLongAgainLeavesCUDA(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	// 60 waits on 20-50 µs kernels, then 60 on 400-1000 µs ones: most of
	// the first half's are left to CUDA, and of the second half's one per
	// kernel (a and b), the one that shows it long; the policy learns the
	// kernel long at its next wait. One more in all is allowed: under
	// heavy bursts of other work on a 2-CPU machine, about one run in 100
	// that explored no arm still left 3, the policy's wait after the
	// hand-back judging the kernel short; most likely a wait that lost
	// its CPU from about its start until after the work completed, which
	// learns only that the completion came somewhere in that gap. A
	// spin that lost its CPU shortly before the completion (a few runs
	// in 100 even on an idle machine, 3 to 5 left) no longer does: the
	// policy learns that the work was still running when the gap began
	// (hybridsync's learn). The program counts the second half's waits
	// CUDA made on unfinished work: those it was left.
	path := filepath.Join(t.TempDir(), "stats.json")
	r := run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path}, "rtapp_dyn", "120", "1", "20000", "400000")
	s := readStats(t, path)
	// Under contention the device arm hands every wait to CUDA, long ones
	// too, and that is right: the test judges the model arm, which only a
	// free CPU keeps to. Contention either starts an exploration or, where
	// other threads of the process look like a spinning team (on a
	// machine loaded enough, the Go runtime's own), runs the device arm
	// with none.
	if o := s.Outcomes; o != nil && (o.Explorations > 0 || o.Team > 0) {
		t.Skipf("other work on this machine contended the program's CPU (outcomes %+v): its waits went to the arms it explored; the model's hand-back cannot be judged", *o)
	}
	m := laterHalf.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no count of the second half's waits in %q", r.stderr)
	}
	later, _ := strconv.Atoi(m[1])
	if s.Deleg < 20 || later > 3 {
		t.Errorf("delegated: %d of 120 waits, %d of the 60 on long kernels; want 20 or more, and at most 3 of the long", s.Deleg, later)
	}
	t.Logf("delegated: %d of 120 waits, %d of the 60 on long kernels", s.Deleg, later)
}

var laterHalf = regexp.MustCompile(`rtapp later-half spin=(\d+)`)

// TestPreloadQuietWhileFree: a thread whose CPU is free checks its own
// run delay and skips most reports to Go (each wakes the Go runtime's
// threads on the program's CPU). On a machine busy with other work the
// CPU may not be free: then the contention must have reached Go.
func TestPreloadQuietWhileFree(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	path := filepath.Join(t.TempDir(), "stats.json")
	run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path}, "rtapp_dyn", "8000", "1", "100000")
	o := readStats(t, path).Outcomes
	if o == nil {
		t.Fatal("no outcomes in the stats of the default mode")
	}
	if o.Explorations > 0 {
		t.Logf("the CPU was contended (by other processes), and Go saw it: %+v", *o)
		return
	}
	if o.QuietChecks == 0 {
		t.Fatalf("outcomes %+v: a free CPU, yet no report was skipped", *o)
	}
	t.Logf("model epochs (reports to Go) %d, skipped %d", o.Epochs["model"], o.QuietChecks)
}

// TestPreloadShortWaitsAloneOnDevice: alone too, a program whose one wait
// per step (2 µs) is about 1% of its time runs CUDA's default (the device
// arm, which skips observing launches) rather than the model, which would
// only leave the same waits to CUDA after observing every launch. (Where
// other work on the machine makes its CPU look contended, the program
// explores as under contention and the test cannot judge the free case;
// TestArmChooserFreeShortWaitsOnDevice checks it alone.)
func TestPreloadShortWaitsAloneOnDevice(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	path := filepath.Join(t.TempDir(), "stats.json")
	run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path}, "stepbench", "1000", "8", "2000", "20000")
	o := readStats(t, path).Outcomes
	if o != nil && (o.Explorations > 0 || o.Team > 0) {
		// A team verdict too needs contended CPUs: the device arm held
		// while the process's other threads spin on them.
		t.Skipf("other work on this machine contended the program's CPUs (outcomes %+v): it explored or held the device arm for its team, as it must then; the free case cannot be judged", *o)
	}
	if o == nil || o.Settled == 0 || o.Epochs["device"] == 0 || o.Epochs["policy"] != 0 {
		t.Fatalf("outcomes %+v; want the device arm settled on, nothing explored", o)
	}
	t.Logf("outcomes %+v", *o)
}

// TestPreloadHookPauseLeavesEpochs: switching the wait hooks off
// (hs_interpose) pauses the thread's epoch, so the time the library was
// not waiting for the program is not counted as an outcome of its arm:
// the epochs add up to no more than the run minus the pause.
func TestPreloadHookPauseLeavesEpochs(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	path := filepath.Join(t.TempDir(), "stats.json")
	const pause = 1500 * time.Millisecond
	r := run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path, fmt.Sprintf("STEPBENCH_PAUSE_MS=%d", pause.Milliseconds())}, "stepbench", "400")
	m := regexp.MustCompile(`elapsed_ns (\d+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no elapsed_ns in %q", r.stderr)
	}
	elapsed, _ := strconv.ParseInt(m[1], 10, 64)
	counted := epochSeconds(t, path)
	active := time.Duration(elapsed) - pause
	if counted == 0 || time.Duration(counted*1e9) > active+pause/10 {
		t.Errorf("epochs counted %.3f s; the run was %v of which %v paused: want some, and no more than %v",
			counted, time.Duration(elapsed), pause, active)
	}
}

// TestPreloadChecksOutcomes: an unmodified program sharing its CPU with a
// busy loop (both pinned to one CPU: real contention, seen through the
// kernel's scheduler statistics) has its waits alternate between CUDA's
// own wait and the policy's, and the library keeps the better: the stats
// show explorations and epochs of both arms. The program checks that no
// wait returned early or with the wrong code, in either arm.
func TestPreloadChecksOutcomes(t *testing.T) {
	need(t)
	st, stderr, cpu := underBusyLoop(t, "rtapp_dyn", "6000", "1", "100000")
	o := st.Outcomes
	if o == nil || o.Explorations == 0 || o.Epochs["device"] == 0 || o.Epochs["policy"] == 0 {
		t.Fatalf("sharing CPU %d with a busy loop: outcomes %+v; want explorations and epochs of both arms", cpu, o)
	}
	// An exploration's epochs, and the run of the arm it chose, are
	// reported into Go together (hybridsync.Plan): fewer reports than
	// epochs once one exploration is done.
	if epochs := o.Epochs["model"] + o.Epochs["device"] + o.Epochs["policy"] + o.Epochs["blocking"]; o.Reports == 0 || o.Reports >= epochs {
		t.Errorf("%d reports for %d epochs; want one per plan of epochs", o.Reports, epochs)
	}
	// In the policy arm the context is switched to blocking-sync and
	// the stream waits are CUDA's own, which then sleep; the event
	// waits, which would spin in CUDA whatever the schedule, block on
	// the library's shadow events. The stand-in saw both sleep, more
	// often than the Go policy blocked.
	blocking, spinning := standin(t, stderr)
	if blocking <= int(st.Blocks) || spinning == 0 {
		t.Errorf("CUDA's own waits: %d blocking, %d spinning; the library's own blocks: %d; want CUDA to have blocked in the policy arm and spun in the device arm",
			blocking, spinning, st.Blocks)
	}
	if o.EventBlocks == 0 || o.EventBlockSeconds <= 0 {
		t.Errorf("event waits of the policy arm on shadow events: %d (%.3f s); want some: they spin in CUDA's own wait",
			o.EventBlocks, o.EventBlockSeconds)
	}
	// Outside the model arm no launch or record is observed (wait.c,
	// set_arm): the event waits there, two in three of this program's,
	// know no kernel. The model arm ran the first 0.3 s of about 1.2.
	if all := st.Calls + st.Unknown.Ready + st.Unknown.Deleg; st.Unknown.Deleg*4 < all {
		t.Errorf("%d of %d waits of no known kernel; want the event waits of the device and policy arms (about half), whose records go unobserved", st.Unknown.Deleg, all)
	}
	t.Logf("sharing CPU %d with a busy loop: %+v; CUDA's waits blocking %d spinning %d, library blocks %d; waits %d, of no known kernel %d",
		cpu, *o, blocking, spinning, st.Blocks, st.Calls, st.Unknown.Deleg)
}

// TestPreloadShortWaitsExplored: the same contention, but a program
// like the launch-bound PyTorch and CuPy ones, whose one wait per step
// (2 µs) is about 1% of its time (8 launches after 20 µs of host work
// each): blocking gains nothing inside such waits, but a thread that
// sleeps often may get more of the shared CPU for its host work, which
// only the outcome shows, so it explores the blocking arm too, and keeps
// the faster arm where the two differ clearly. (Alone, the same program
// stays on the device arm: TestPreloadShortWaitsAloneOnDevice.)
func TestPreloadShortWaitsExplored(t *testing.T) {
	need(t)
	st, _, cpu := underBusyLoop(t, "stepbench", "600", "8", "2000", "20000")
	o := st.Outcomes
	if o == nil || o.Explorations == 0 || o.Epochs["policy"] == 0 || o.Epochs["device"] == 0 {
		t.Fatalf("sharing CPU %d with a busy loop: outcomes %+v; want explorations and epochs of both arms", cpu, o)
	}
	// The decision compares smoothed explorations, the rates sum them
	// all: only a clear difference must agree.
	dev, pol := o.Rates["device"], o.Rates["policy"]
	kept := "device"
	if o.Chosen["policy"] > o.Chosen["device"] {
		kept = "policy"
	}
	if faster := map[bool]string{true: "device", false: "policy"}[dev > pol]; max(dev, pol) > 1.25*min(dev, pol) && kept != faster {
		t.Errorf("exploring rates %v (waits/s), chosen %v: the slower arm kept", o.Rates, o.Chosen)
	}
	t.Logf("sharing CPU %d with a busy loop: %+v", cpu, *o)
}

// TestPreloadShortWaitsNeverEarly: the invariant on that path: a
// program with 2 µs kernels under the busy loop, whose waits now go
// through the blocking arm's explorations too, checks every wait (no
// return before the kernel's completion, CUDA's codes, failed kernels
// and invalid handles included; rtapp exits non-zero otherwise).
func TestPreloadShortWaitsNeverEarly(t *testing.T) {
	need(t)
	// Long enough (about a second) to outlast the busy loop's 300 ms start.
	st, _, cpu := underBusyLoop(t, "rtapp_dyn", "400000", "1", "2000")
	if o := st.Outcomes; o == nil || o.Epochs["policy"] == 0 {
		t.Fatalf("sharing CPU %d with a busy loop: outcomes %+v; want epochs of the policy arm", cpu, o)
	}
	t.Logf("sharing CPU %d with a busy loop: %+v", cpu, *st.Outcomes)
}

// underBusyLoop runs program (from the built test programs) under
// LD_PRELOAD, pinned with a busy loop to the last online CPU, and returns
// its stats, its stderr and the CPU.
func underBusyLoop(t *testing.T, program string, args ...string) (stats, string, int) {
	t.Helper()
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Fatalf("taskset (util-linux) is needed to pin the program and its co-runner: %v", err)
	}
	cpus, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	cpu := cpus[len(cpus)-1]
	cpuArg := strconv.Itoa(cpu)
	// The busy loop starts after the program, whose reports to Go are
	// then checked in C while its CPU is free (Epoch.Quiet): the
	// contention must reach Go all the same.
	loop := exec.Command(taskset, "-c", cpuArg, "/bin/sh", "-c", "while :; do :; done")
	started := make(chan error, 1)
	late := time.AfterFunc(300*time.Millisecond, func() { started <- loop.Start() })
	defer func() {
		if !late.Stop() && <-started == nil {
			loop.Process.Kill()
			loop.Wait()
		}
	}()
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	path := filepath.Join(t.TempDir(), "stats.json")
	r := run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path}, taskset, append([]string{"-c", cpuArg, filepath.Join(built.dir, program)}, args...)...)
	return readStats(t, path), r.stderr, cpu
}

// TestPreloadElsewhere: a program that never uses CUDA is untouched, and
// writes no stats file.
func TestPreloadElsewhere(t *testing.T) {
	need(t)
	dir := t.TempDir()
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	r, err := runErr([]string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + filepath.Join(dir, "s.json")}, "/bin/sh", "-c", "echo hello; ls /nonexistent-dir 2>/dev/null; exit 3")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit: %v", err)
	}
	if r.stdout != "hello\n" || r.stderr != "" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("stats written by a program that never used CUDA: %v", files)
	}
}

func TestPkgConfig(t *testing.T) {
	need(t)
	pc := exec.Command("pkg-config", "--cflags", "--libs", "hybridsync")
	pc.Env = append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(built.prefix, "lib", "pkgconfig"))
	flags, err := pc.Output()
	if err != nil {
		t.Fatalf("pkg-config --cflags --libs hybridsync: %v", err)
	}
	root, _ := repoRoot()
	pr := filepath.Join(root, "libhybridsync", "testdata", "programs")
	args := append([]string{"-O2", "-I" + pr, "-o", filepath.Join(built.dir, "hsapp_pc"), filepath.Join(pr, "hsapp.c")}, strings.Fields(string(flags))...)
	args = append(args, "-L"+built.dir, "-lcudart", "-lpthread", "-ldl")
	if err := sh(built.dir, "gcc", args...); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "hsapp_pc", "basic")
}

func TestCMakeConsumer(t *testing.T) {
	need(t)
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("cmake not installed (.ci/setup-libhybridsync.sh installs it)")
	}
	root, _ := repoRoot()
	bdir := t.TempDir()
	if err := sh(bdir, "cmake", "-S", filepath.Join(root, "libhybridsync", "testdata", "cmake"), "-B", bdir, "-DCMAKE_PREFIX_PATH="+built.prefix); err != nil {
		t.Fatal(err)
	}
	if err := sh(bdir, "cmake", "--build", bdir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"consumer", "consumer_static"} {
		run(t, nil, filepath.Join(bdir, p))
	}
}

// TestCMakeProjectInclude: experiments/apps/gromacs-link.cmake, given as
// CMAKE_PROJECT_INCLUDE, links the installed library into the programs of
// a project that does not mention it (the recipe of docs/gromacs.md):
// installed, the program needs it, finds it through its run path and
// starts with it loaded.
func TestCMakeProjectInclude(t *testing.T) {
	need(t)
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("cmake not installed (.ci/setup-libhybridsync.sh installs it)")
	}
	root, _ := repoRoot()
	bdir, prefix := t.TempDir(), t.TempDir()
	if err := sh(bdir, "cmake", "-S", filepath.Join(root, "libhybridsync", "testdata", "cmake-link"), "-B", bdir,
		"-DCMAKE_PREFIX_PATH="+built.prefix, "-DCMAKE_INSTALL_PREFIX="+prefix,
		"-DCMAKE_PROJECT_INCLUDE="+filepath.Join(root, "experiments", "apps", "gromacs-link.cmake")); err != nil {
		t.Fatal(err)
	}
	if err := sh(bdir, "cmake", "--build", bdir); err != nil {
		t.Fatal(err)
	}
	if err := sh(bdir, "cmake", "--install", bdir); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(prefix, "bin", "unaware")
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	needed, _ := f.ImportedLibraries()
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	rpath, _ := f.DynString(elf.DT_RPATH)
	f.Close()
	if !slices.Contains(needed, "libhybridsync.so.0") {
		t.Errorf("installed program needs %v, want libhybridsync.so.0 among them", needed)
	}
	libdir := filepath.Join(built.prefix, "lib")
	if paths := strings.Join(append(runpath, rpath...), ":"); !slices.Contains(strings.Split(paths, ":"), libdir) {
		t.Errorf("run path %q, want %s in it", paths, libdir)
	}
	out, err := exec.Command("ldd", exe).CombinedOutput()
	if err != nil || !strings.Contains(string(out), filepath.Join(libdir, "libhybridsync.so.0")) {
		t.Errorf("ldd %s: %v\n%s; want libhybridsync.so.0 found in %s", exe, err, out, libdir)
	}
	// Run as installed: no LD_LIBRARY_PATH, the run path alone.
	cmd := exec.Command(exe)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_") && !strings.HasPrefix(kv, "HYBRIDSYNC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HYBRIDSYNC_INTERPOSE=1")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "unaware\n" {
		t.Errorf("the linked program: %v, output %q", err, out)
	}
}

// TestInstalledStripped: the installed library has no symbol table or
// debug information (the built one has); the tests above load it, so it
// works stripped.
func TestInstalledStripped(t *testing.T) {
	need(t)
	for _, c := range []struct {
		path   string
		symtab bool
	}{
		{filepath.Join(built.dir, "build", "lib", "libhybridsync.so.0.1.0"), true},
		{filepath.Join(built.prefix, "lib", "libhybridsync.so.0.1.0"), false},
	} {
		f, err := elf.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		has := f.Section(".symtab") != nil
		syms, _ := f.DynamicSymbols()
		f.Close()
		if has != c.symtab {
			t.Errorf("%s: .symtab present %v, want %v", c.path, has, c.symtab)
		}
		if !slices.ContainsFunc(syms, func(s elf.Symbol) bool { return s.Name == "hs_sync" }) {
			t.Errorf("%s: dynamic symbol hs_sync missing", c.path)
		}
	}
}

// TestMultiarchLibdir: make install LIBDIR=$PREFIX/lib/x86_64-linux-gnu
// puts the library there, and pkg-config and CMake consumers find it
// there.
func TestMultiarchLibdir(t *testing.T) {
	need(t)
	root, _ := repoRoot()
	prefix := filepath.Join(t.TempDir(), "usr")
	libdir := filepath.Join(prefix, "lib", "x86_64-linux-gnu")
	if err := sh(root, "make", "-s", "-f", "libhybridsync/Makefile.inc", "install", "PREFIX="+prefix, "LIBDIR="+libdir,
		"HS_BUILD="+filepath.Join(built.dir, "build")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(libdir, "libhybridsync.so.0.1.0")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(prefix, "lib", "libhybridsync.so.0.1.0")); err == nil {
		t.Error("the library is in $PREFIX/lib too")
	}
	pc := exec.Command("pkg-config", "--variable=libdir", "hybridsync")
	pc.Env = append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(libdir, "pkgconfig"))
	if out, err := pc.Output(); err != nil || strings.TrimSpace(string(out)) != libdir {
		t.Errorf("pkg-config libdir: %q %v, want %s", out, err, libdir)
	}
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("cmake not installed (.ci/setup-libhybridsync.sh installs it)")
	}
	bdir := t.TempDir()
	if err := sh(bdir, "cmake", "-S", filepath.Join(root, "libhybridsync", "testdata", "cmake"), "-B", bdir,
		"-Dhybridsync_DIR="+filepath.Join(libdir, "cmake", "hybridsync")); err != nil {
		t.Fatal(err)
	}
	if err := sh(bdir, "cmake", "--build", bdir); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ldd", filepath.Join(bdir, "consumer")).Output()
	if err != nil || !strings.Contains(string(out), libdir) {
		t.Errorf("consumer links %s, want the library in %s", out, libdir)
	}
}

// TestStatsUnwritable: a stats path that cannot be written costs the
// program nothing (exit status, output) and is reported only when asked.
func TestStatsUnwritable(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	env := []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=/nonexistent-dir/stats.json"}
	r := run(t, env, "rtapp_dyn", "5", "1")
	if strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr without HYBRIDSYNC_LOG: %q", r.stderr)
	}
	r = run(t, append(env, "HYBRIDSYNC_LOG=error"), "rtapp_dyn", "5", "1")
	if !strings.Contains(r.stderr, "stats: open /nonexistent-dir/stats.json") {
		t.Errorf("HYBRIDSYNC_LOG=error: stderr %q", r.stderr)
	}
}

// TestPreloadPolicyWays: the same contention for longer. Once the
// policy arm has been chosen, a thread that waits on events compares it
// with CUDA's blocking-sync mode as CUDA runs it (ArmBlocking: event waits
// spin) every other exploration; the program checks that no wait in any
// arm returned early or with the wrong code.
func TestPreloadPolicyWays(t *testing.T) {
	need(t)
	st, _, cpu := underBusyLoop(t, "rtapp_dyn", "20000", "1", "100000")
	o := st.Outcomes
	if o == nil || o.Explorations < 2 {
		t.Fatalf("sharing CPU %d with a busy loop: outcomes %+v; want two explorations or more", cpu, o)
	}
	// The exploration after the first that chose the policy compares its
	// two ways: with two choices of it, that one ran.
	if o.Chosen["policy"]+o.Chosen["blocking"] < 2 {
		t.Skipf("sharing CPU %d with a busy loop, the policy won %d of %d explorations (chosen %v): its two ways need it chosen before the last", cpu, o.Chosen["policy"]+o.Chosen["blocking"], o.Explorations, o.Chosen)
	}
	if o.Epochs["blocking"] == 0 {
		t.Errorf("outcomes %+v: the policy was chosen, and no epoch of CUDA's blocking-sync mode ran", *o)
	}
	t.Logf("sharing CPU %d with a busy loop: %+v", cpu, *o)
}
