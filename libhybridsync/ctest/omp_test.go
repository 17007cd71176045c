package ctest

// OpenMP and hybridsync-run: the launcher's environment, exit codes and
// errors, its install, the stats' "openmp" object, whether a preloaded
// constructor runs before the OpenMP runtimes read their environment, and
// a barrier-heavy OpenMP program beside a busy loop on each of its CPUs,
// as it is and through the launcher.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/openmp"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
	resultstats "github.com/vgpu-probe/vgpu-probe/results/stats"
)

// The launcher's bounded settings, on contended CPUs or with
// HYBRIDSYNC_OPENMP=bounded: openmp.BoundedEnv's, the one place the
// bound is chosen.
var (
	defaultSpinCount = boundedSetting("GOMP_SPINCOUNT")
	defaultBlockTime = boundedSetting("KMP_BLOCKTIME")
)

func boundedSetting(name string) string {
	for _, kv := range openmp.BoundedEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	panic("openmp.BoundedEnv sets no " + name)
}

// ompBuilt is what ompPrograms built, once.
var ompBuilt struct {
	once            sync.Once
	gnu             string // the program with GNU libgomp ("" and why in gnuErr)
	llvm            string // the same program with LLVM's libomp ("" and why in llvmErr)
	pre             string // a preloadable library whose constructor sets the OpenMP variables
	gnuErr, llvmErr error
}

// ompPrograms builds testdata/programs/ompbarrier.c against libgomp (gcc
// -fopenmp) and, where libomp is installed (libomp-dev), against libomp,
// and the preloadable setenvpre.so; both programs link the CUDA stand-in's
// runtime for OMPBARRIER_CUDA.
func ompPrograms(t *testing.T) {
	t.Helper()
	need(t)
	ompBuilt.once.Do(func() {
		root, _ := repoRoot()
		pr := filepath.Join(root, "libhybridsync", "testdata", "programs")
		src := filepath.Join(pr, "ompbarrier.c")
		dir := built.dir
		if err := sh(dir, "gcc", "-O2", "-Wall", "-Werror", "-fopenmp", "-I"+pr, "-o", "ompbarrier", src, "-L.", "-lcudart", "-lpthread", "-ldl"); err != nil {
			ompBuilt.gnuErr = err
		} else {
			ompBuilt.gnu = filepath.Join(dir, "ompbarrier")
		}
		// gcc's OpenMP code calls GOMP_* entry points, which libomp
		// provides too: compile with -fopenmp, link libomp instead.
		err := sh(dir, "gcc", "-O2", "-Wall", "-Werror", "-fopenmp", "-I"+pr, "-c", "-o", "ompbarrier.o", src)
		if err == nil {
			err = sh(dir, "gcc", "-o", "ompbarrier_llvm", "ompbarrier.o", "-l:libomp.so.5", "-L.", "-lcudart", "-lpthread", "-ldl")
		}
		if err != nil {
			ompBuilt.llvmErr = err
		} else {
			ompBuilt.llvm = filepath.Join(dir, "ompbarrier_llvm")
		}
		pre := filepath.Join(dir, "setenvpre.c")
		code := `#include <stdlib.h>
__attribute__((constructor)) static void early(void)
{
	setenv("GOMP_SPINCOUNT", "4321", 1);
	setenv("KMP_BLOCKTIME", "7", 1);
}
`
		if os.WriteFile(pre, []byte(code), 0o644) == nil && sh(dir, "gcc", "-O2", "-shared", "-fPIC", "-o", "setenvpre.so", pre) == nil {
			ompBuilt.pre = filepath.Join(dir, "setenvpre.so")
		}
	})
}

func needGNUOpenMP(t *testing.T) string {
	t.Helper()
	ompPrograms(t)
	if ompBuilt.gnu == "" {
		t.Skipf("gcc cannot build an OpenMP program (gcc -fopenmp needs libgomp, installed with gcc): %v", ompBuilt.gnuErr)
	}
	return ompBuilt.gnu
}

func needLLVMOpenMP(t *testing.T) string {
	t.Helper()
	ompPrograms(t)
	if ompBuilt.llvm == "" {
		t.Skipf("LLVM's OpenMP runtime is not installed (libomp-dev; .ci/setup-omp.sh installs it): %v", ompBuilt.llvmErr)
	}
	return ompBuilt.llvm
}

// libompOf returns the path of the libomp the LLVM-runtime program loads.
func libompOf(t *testing.T) string {
	t.Helper()
	prog := needLLVMOpenMP(t)
	out, err := exec.Command("ldd", prog).Output()
	for _, l := range strings.Split(string(out), "\n") {
		if name, path, ok := strings.Cut(strings.TrimSpace(l), " => "); ok && strings.HasPrefix(name, "libomp") {
			return strings.Fields(path)[0]
		}
	}
	t.Fatalf("ldd %s: %v: no libomp in\n%s", prog, err, out)
	return ""
}

// launcher is the installed hybridsync-run.
func launcher() string { return filepath.Join(built.prefix, "bin", "hybridsync-run") }

// ompEnvPrefixes are the variables a test's environment must not bring
// in: the library's, the loader's, and the OpenMP runtimes'.
var ompEnvPrefixes = []string{"HYBRIDSYNC_", "LD_", "OMP_", "GOMP_", "KMP_"}

// ompRun runs prog with args, killed after limit, in this process's
// environment without any of ompEnvPrefixes, plus the stand-in's
// LD_LIBRARY_PATH, HYBRIDSYNC_OPENMP=bounded (the launcher's settings
// whatever this machine's load; TestLauncherFollowsLateNeighbour follows it)
// and env. Returns stdout, stderr and the exit code (-1:
// did not run or was killed, err says which).
func ompRun(limit time.Duration, env []string, prog string, args ...string) (stdout, stderr string, code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(ompEnvPrefixes, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+built.dir, "HYBRIDSYNC_OPENMP=bounded")
	cmd.Env = append(cmd.Env, env...) // later values win
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code = -1
	if cmd.ProcessState != nil && ctx.Err() == nil {
		code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", limit, ctx.Err())
	}
	return out.String(), errb.String(), code, err
}

// envOf parses `env`'s output.
func envOf(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestLauncherEnvironment: hybridsync-run preloads the library installed
// beside it, before what LD_PRELOAD had, and sets the bounded OpenMP
// waits only where the user set nothing: OMP_WAIT_POLICY keeps both
// unset, a set GOMP_SPINCOUNT or KMP_BLOCKTIME (even empty) stays as it
// is; HYBRIDSYNC_RUN_SET names what it set, and a launcher inside another
// adds nothing and keeps the outer one's record.
func TestLauncherEnvironment(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so.0")
	cases := []struct {
		name string
		env  []string
		args []string
		want map[string]string // "<unset>": absent
	}{
		{"defaults", nil, nil, map[string]string{
			"LD_PRELOAD": so, "GOMP_SPINCOUNT": defaultSpinCount, "KMP_BLOCKTIME": defaultBlockTime, "OMP_TOOL": "<unset>",
			"OMP_WAIT_POLICY":    "<unset>",
			"HYBRIDSYNC_RUN_SET": "GOMP_SPINCOUNT=" + defaultSpinCount + " KMP_BLOCKTIME=" + defaultBlockTime}},
		{"wait policy", []string{"OMP_WAIT_POLICY=passive", "LD_PRELOAD=/nonexistent/a.so"}, nil, map[string]string{
			"LD_PRELOAD": so + " /nonexistent/a.so", "OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "<unset>", "KMP_BLOCKTIME": "<unset>",
			"HYBRIDSYNC_RUN_SET": ""}},
		{"user's values", []string{"GOMP_SPINCOUNT=77", "KMP_BLOCKTIME=", "OMP_TOOL=enabled"}, nil, map[string]string{
			"GOMP_SPINCOUNT": "77", "KMP_BLOCKTIME": "", "OMP_TOOL": "enabled", "HYBRIDSYNC_RUN_SET": ""}},
		{"nested", []string{"KMP_BLOCKTIME=5"}, []string{launcher()}, map[string]string{
			"LD_PRELOAD": so, "GOMP_SPINCOUNT": defaultSpinCount, "KMP_BLOCKTIME": "5",
			"HYBRIDSYNC_RUN_SET": "GOMP_SPINCOUNT=" + defaultSpinCount}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{}, c.args...), "env")
			out, stderr, code, err := ompRun(time.Minute, c.env, launcher(), args...)
			if err != nil || code != 0 {
				t.Fatalf("hybridsync-run %v: %v (exit %d)\n%s", args, err, code, stderr)
			}
			got := envOf(out)
			for k, want := range c.want {
				v, ok := got[k]
				switch {
				case want == "<unset>" && ok:
					t.Errorf("%s=%q, want it unset", k, v)
				case want != "<unset>" && (!ok || v != want):
					t.Errorf("%s=%q (set: %v), want %q", k, v, ok, want)
				}
			}
		})
	}
}

// TestLauncherExitAndErrors: the program's exit status is the launcher's
// (exec); a missing command, no command and a missing library are each
// one line on stderr, exit 127, 2 and 127; --help goes to stdout.
func TestLauncherExitAndErrors(t *testing.T) {
	need(t)
	oneLine := func(t *testing.T, stderr, want string) {
		t.Helper()
		if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "hybridsync-run: ") || !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want one line 'hybridsync-run: ...%s...'", stderr, want)
		}
	}
	if _, _, code, _ := ompRun(time.Minute, nil, launcher(), "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit status %d, want the program's 7", code)
	}
	if out, _, code, _ := ompRun(time.Minute, nil, launcher(), "sh", "-c", "echo $$; kill -TERM $$"); code != -1 || out == "" {
		// A signal's death is the launcher's own: the shell was exec'd.
		t.Errorf("a program killed by SIGTERM: exit %d, want the signal's", code)
	}
	_, stderr, code, _ := ompRun(time.Minute, nil, launcher(), "no-such-command-hs")
	if code != 127 {
		t.Errorf("missing command: exit %d, want 127", code)
	}
	oneLine(t, stderr, "no-such-command-hs: command not found")
	_, stderr, code, _ = ompRun(time.Minute, nil, launcher())
	if code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	oneLine(t, stderr, "no command given")
	alone := filepath.Join(t.TempDir(), "bin", "hybridsync-run")
	if err := os.MkdirAll(filepath.Dir(alone), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sh(built.dir, "cp", launcher(), alone); err != nil {
		t.Fatal(err)
	}
	_, stderr, code, _ = ompRun(time.Minute, nil, alone, "true")
	if code != 127 {
		t.Errorf("launcher without its library: exit %d, want 127", code)
	}
	oneLine(t, stderr, "libhybridsync not found")
	out, stderr, code, _ := ompRun(time.Minute, nil, launcher(), "--help")
	if code != 0 || !strings.HasPrefix(out, "Usage: hybridsync-run CMD [ARGS...]") || stderr != "" {
		t.Errorf("--help: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// mapsHave says whether the running program's mappings (cat's own, run
// through the launcher) include lib, a file: the library was loaded.
func mapsHave(t *testing.T, launcher, lib string) {
	t.Helper()
	out, stderr, code, err := ompRun(time.Minute, nil, launcher, "cat", "/proc/self/maps")
	if err != nil || code != 0 {
		t.Fatalf("%s cat /proc/self/maps: %v (exit %d)\n%s", launcher, err, code, stderr)
	}
	real, err := filepath.EvalSymlinks(lib)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, real) {
		t.Errorf("%s: the program did not load %s", launcher, real)
	}
}

// TestLauncherInstalled: `make install-lib` puts hybridsync-run in
// $(BINDIR), mode 0755, and it preloads the library of its own prefix:
// installed, staged with DESTDIR and then moved, reached through a
// symbolic link, and in the build tree (build/bin finds build/lib); the
// installed script passes shellcheck where that is installed; uninstall-lib
// removes it.
func TestLauncherInstalled(t *testing.T) {
	need(t)
	fi, err := os.Stat(launcher())
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed launcher: %v %v, want mode 0755", fi, err)
	}
	mapsHave(t, launcher(), filepath.Join(built.prefix, "lib", "libhybridsync.so.0"))
	tree := filepath.Join(built.dir, "build")
	mapsHave(t, filepath.Join(tree, "bin", "hybridsync-run"), filepath.Join(tree, "lib", "libhybridsync.so.0"))
	link := filepath.Join(t.TempDir(), "hsrun")
	if err := os.Symlink(launcher(), link); err != nil {
		t.Fatal(err)
	}
	mapsHave(t, link, filepath.Join(built.prefix, "lib", "libhybridsync.so.0"))

	// Staged under DESTDIR for /opt/hs, then moved elsewhere whole.
	root, _ := repoRoot()
	stage := t.TempDir()
	mk := func(target string, args ...string) {
		t.Helper()
		all := append([]string{"-s", "-f", "libhybridsync/Makefile.inc", target, "PREFIX=/opt/hs", "DESTDIR=" + stage, "HS_BUILD=" + tree}, args...)
		if err := sh(root, "make", all...); err != nil {
			t.Fatal(err)
		}
	}
	mk("install-lib")
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(filepath.Join(stage, "opt", "hs"), moved); err != nil {
		t.Fatal(err)
	}
	mapsHave(t, filepath.Join(moved, "bin", "hybridsync-run"), filepath.Join(moved, "lib", "libhybridsync.so.0"))
	if sc, err := exec.LookPath("shellcheck"); err == nil {
		if out, err := exec.Command(sc, "-s", "sh", filepath.Join(moved, "bin", "hybridsync-run")).CombinedOutput(); err != nil {
			t.Errorf("shellcheck: %v\n%s", err, out)
		}
	} else {
		t.Log("shellcheck not installed: the script is not linted")
	}
	if err := os.Rename(moved, filepath.Join(stage, "opt", "hs")); err != nil {
		t.Fatal(err)
	}
	mk("uninstall-lib")
	if _, err := os.Stat(filepath.Join(stage, "opt", "hs", "bin", "hybridsync-run")); !os.IsNotExist(err) {
		t.Errorf("uninstall-lib left bin/hybridsync-run: %v", err)
	}
}

var displayed = regexp.MustCompile(`(?m)^\s*(?:\[host\] )?(GOMP_SPINCOUNT|KMP_BLOCKTIME|OMP_WAIT_POLICY)\s*=\s*'([^']*)'`)

// runtimeSettings runs prog (a command and its first arguments) with OMPBARRIER_DISPLAY_ENV=1 (omp_display_env:
// what the runtime parsed) and returns the wait settings it printed.
func runtimeSettings(t *testing.T, env []string, prog ...string) map[string]string {
	t.Helper()
	args := append(prog[1:len(prog):len(prog)], "10", "1", "1", "0")
	_, stderr, code, err := ompRun(time.Minute, append([]string{"OMPBARRIER_DISPLAY_ENV=1", "OMP_NUM_THREADS=2"}, env...), prog[0], args...)
	if err != nil || code != 0 {
		t.Fatalf("%s: %v (exit %d)\n%s", prog, err, code, stderr)
	}
	m := map[string]string{}
	for _, s := range displayed.FindAllStringSubmatch(stderr, -1) {
		m[s[1]] = s[2]
	}
	return m
}

// TestPreloadConstructorOrder answers whether a preloaded library could
// set the OpenMP runtimes' waits itself, from its constructor: GNU
// libgomp reads its environment in its own constructor, which runs before
// a preloaded library's (the loader runs a program's dependencies'
// initialisers first, LD_PRELOAD's last); LLVM's libomp reads its at the
// first OpenMP call, after every constructor. So only the launcher,
// setting the environment before the program starts, reaches both
// (docs/libhybridsync.md, "OpenMP waits and hybridsync-run"). And the
// launcher's values are the ones the runtimes run with.
func TestPreloadConstructorOrder(t *testing.T) {
	gnu := needGNUOpenMP(t)
	if ompBuilt.pre == "" {
		t.Fatal("setenvpre.so was not built")
	}
	got := runtimeSettings(t, []string{"LD_PRELOAD=" + ompBuilt.pre}, gnu)
	if got["GOMP_SPINCOUNT"] == "" {
		t.Fatalf("libgomp's omp_display_env printed no GOMP_SPINCOUNT: %v", got)
	}
	if got["GOMP_SPINCOUNT"] == "4321" {
		t.Errorf("libgomp took GOMP_SPINCOUNT from a preloaded constructor: the library could set it itself; docs/libhybridsync.md says it cannot")
	}
	t.Logf("libgomp with a preloaded constructor setting GOMP_SPINCOUNT=4321 runs with %v", got)
	if got := runtimeSettings(t, nil, launcherArgs(gnu)...); got["GOMP_SPINCOUNT"] != defaultSpinCount {
		t.Errorf("libgomp through hybridsync-run runs with %v, want GOMP_SPINCOUNT %s", got, defaultSpinCount)
	}
	if ompBuilt.llvm == "" {
		t.Logf("libomp not installed (libomp-dev): its order is not checked: %v", ompBuilt.llvmErr)
		return
	}
	got = runtimeSettings(t, []string{"LD_PRELOAD=" + ompBuilt.pre}, ompBuilt.llvm)
	if got["KMP_BLOCKTIME"] != "7" {
		t.Errorf("libomp with a preloaded constructor setting KMP_BLOCKTIME=7 runs with %v: docs/libhybridsync.md says libomp reads it later", got)
	}
	if got := runtimeSettings(t, nil, launcherArgs(ompBuilt.llvm)...); got["KMP_BLOCKTIME"] != defaultBlockTime {
		t.Errorf("libomp through hybridsync-run runs with %v, want KMP_BLOCKTIME %s", got, defaultBlockTime)
	}
}

// launcherArgs is prog run through the launcher, as ompRun's prog and args.
func launcherArgs(prog string) []string { return []string{launcher(), prog} }

// ompStats is the stats' openmp object.
type ompStats struct {
	Runtime            string            `json:"runtime"`
	Libraries          []string          `json:"libraries"`
	Env                map[string]string `json:"env"`
	HybridsyncRun      bool              `json:"hybridsync_run"`
	SetByHybridsyncRun []string          `json:"set_by_hybridsync_run"`
	BlocktimeLive      *ompLive          `json:"blocktime_live"`
	SpinLive           *ompSpin          `json:"spin_live"`
}

// ompSpin is the openmp object's spin_live: libgomp's spin as the library
// followed it while the program ran.
type ompSpin struct {
	Active      bool   `json:"active"`
	Why         string `json:"why"`
	Library     string `json:"library"`
	SpinCount   uint64 `json:"spin_count"`
	BlocktimeMS int64  `json:"blocktime_ms"`
	Changes     uint64 `json:"changes"`
	Windows     uint64 `json:"windows"`
	Contended   uint64 `json:"contended"`
}

// ompLive is the openmp object's blocktime_live: libomp's blocktime as
// the library adapted it while the program ran.
type ompLive struct {
	Active     bool   `json:"active"`
	Why        string `json:"why"`
	Threads    uint64 `json:"threads"`
	OriginalMS *int64 `json:"original_ms"`
	CurrentMS  *int64 `json:"current_ms"`
	Changes    uint64 `json:"changes"`
}

func (l *ompLive) String() string {
	if l == nil {
		return "<no blocktime_live>"
	}
	ms := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatInt(*p, 10)
	}
	return fmt.Sprintf("{active %v why %q threads %d original %s current %s changes %d}", l.Active, l.Why, l.Threads, ms(l.OriginalMS), ms(l.CurrentMS), l.Changes)
}

// openmpOf runs prog (its args after it) with the stats file asked for and
// returns the file's openmp object and the doc's engaged flag.
func openmpOf(t *testing.T, env []string, prog ...string) ompStats {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stats.json")
	env = append([]string{"HYBRIDSYNC_STATS=" + path, "OMP_NUM_THREADS=2", "OMPBARRIER_CUDA=200"}, env...)
	_, stderr, code, err := ompRun(2*time.Minute, env, prog[0], prog[1:]...)
	if err != nil || code != 0 {
		t.Fatalf("%v: %v (exit %d)\n%s", prog, err, code, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("stats file: %v\n%s", err, stderr)
	}
	var doc struct {
		Engaged bool      `json:"engaged"`
		Calls   *uint64   `json:"calls"`
		OpenMP  *ompStats `json:"openmp"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.OpenMP == nil || !doc.Engaged || doc.Calls == nil {
		t.Fatalf("stats %s: %v, want engaged stats with an openmp object:\n%s", path, err, b)
	}
	return *doc.OpenMP
}

// TestStatsOpenMP: the stats' openmp object names the runtime the program
// ran with, the wait settings in its environment, and which of them
// hybridsync-run set.
func TestStatsOpenMP(t *testing.T) {
	gnu := needGNUOpenMP(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	args := []string{"50", "2", "5", "5"}
	t.Run("libgomp through hybridsync-run", func(t *testing.T) {
		o := openmpOf(t, nil, append([]string{launcher(), gnu}, args...)...)
		if o.Runtime != "libgomp" || len(o.Libraries) != 1 || !strings.Contains(filepath.Base(o.Libraries[0]), "libgomp") {
			t.Errorf("runtime %q in %v, want libgomp", o.Runtime, o.Libraries)
		}
		if o.Env["GOMP_SPINCOUNT"] != defaultSpinCount || o.Env["KMP_BLOCKTIME"] != defaultBlockTime || !o.HybridsyncRun ||
			!slices.Equal(o.SetByHybridsyncRun, []string{"GOMP_SPINCOUNT", "KMP_BLOCKTIME"}) {
			t.Errorf("%+v, want the launcher's settings, set by it", o)
		}
	})
	t.Run("libgomp preloaded, the user's spin count", func(t *testing.T) {
		o := openmpOf(t, []string{"LD_PRELOAD=" + so, "GOMP_SPINCOUNT=50"}, append([]string{gnu}, args...)...)
		if o.Runtime != "libgomp" || o.HybridsyncRun || len(o.SetByHybridsyncRun) != 0 || !maps.Equal(o.Env, map[string]string{"GOMP_SPINCOUNT": "50"}) {
			t.Errorf("%+v, want libgomp with the user's GOMP_SPINCOUNT=50 only", o)
		}
	})
	t.Run("the user's value through hybridsync-run", func(t *testing.T) {
		o := openmpOf(t, []string{"GOMP_SPINCOUNT=50"}, append([]string{launcher(), gnu}, args...)...)
		if o.Env["GOMP_SPINCOUNT"] != "50" || !o.HybridsyncRun || !slices.Equal(o.SetByHybridsyncRun, []string{"KMP_BLOCKTIME"}) {
			t.Errorf("%+v, want the user's GOMP_SPINCOUNT and the launcher's KMP_BLOCKTIME", o)
		}
	})
	t.Run("no OpenMP", func(t *testing.T) {
		o := openmpOf(t, []string{"LD_PRELOAD=" + so}, filepath.Join(built.dir, "rtapp_dyn"), "5", "1")
		if o.Runtime != "none" || len(o.Libraries) != 0 || len(o.Env) != 0 || o.HybridsyncRun {
			t.Errorf("%+v, want runtime none and nothing else", o)
		}
	})
	t.Run("libomp through hybridsync-run", func(t *testing.T) {
		llvm := needLLVMOpenMP(t)
		o := openmpOf(t, nil, append([]string{launcher(), llvm}, args...)...)
		if o.Runtime != "libomp" || len(o.Libraries) != 1 || o.Env["KMP_BLOCKTIME"] != defaultBlockTime {
			t.Errorf("%+v, want libomp with KMP_BLOCKTIME %s", o, defaultBlockTime)
		}
	})
}

// TestPreloadLLVMOpenMP: a program on LLVM's libomp under LD_PRELOAD of
// the library alone. libomp looks for an OMPT tool with
// dlsym(RTLD_NEXT, "ompt_start_tool"), which libc answers from its
// caller's return address: the library's dlsym must leave it the
// caller's (a tail call), or libomp finds its own function again and
// calls itself for ever.
func TestPreloadLLVMOpenMP(t *testing.T) {
	llvm := needLLVMOpenMP(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	_, stderr, code, err := ompRun(20*time.Second, []string{"LD_PRELOAD=" + so, "OMP_NUM_THREADS=2"}, llvm, "20", "1", "1", "0")
	if err != nil || code != 0 {
		t.Fatalf("libomp program under LD_PRELOAD: %v (exit %d)\n%s", err, code, stderr)
	}
}

// The barrier-heavy program's shape: per step the master sleeps 2 ms (a
// blocking wait for the GPU), does 10 µs of serial work, then 8 parallel
// regions of 10 µs per thread, each ending in a barrier.
var ompShape = []string{"8", "10", "10", "2000"}

// ompStep runs the program once on cpus (two threads, one on each),
// through the launcher or not, and returns its time and CPU per step in
// µs.
func ompStep(t *testing.T, prog string, viaLauncher bool, cpus [2]int, steps int) (wallUS, cpuUS float64) {
	t.Helper()
	list := fmt.Sprintf("%d,%d", cpus[0], cpus[1])
	args := append([]string{"taskset", "-c", list, prog, strconv.Itoa(steps)}, ompShape...)
	if viaLauncher {
		args = append([]string{launcher()}, args...)
	}
	env := []string{"OMP_NUM_THREADS=2", fmt.Sprintf("OMP_PLACES={%d},{%d}", cpus[0], cpus[1]), "OMP_PROC_BIND=true", "HYBRIDSYNC_OPENMP=auto"}
	_, stderr, code, err := ompRun(3*time.Minute, env, args[0], args[1:]...)
	if err != nil || code != 0 {
		t.Fatalf("%v: %v (exit %d)\n%s", args, err, code, stderr)
	}
	if _, err := fmt.Sscanf(stderr[strings.LastIndex(stderr, "ompbarrier threads"):], "ompbarrier threads 2 step_us %g cpu_us %g", &wallUS, &cpuUS); err != nil {
		t.Fatalf("%v: no result line (%v):\n%s", args, err, stderr)
	}
	return wallUS, cpuUS
}

// busyLoops starts a `while :; do :; done` pinned to each of cpus and
// returns what stops them.
func busyLoops(t *testing.T, cpus [2]int) func() {
	t.Helper()
	stop, err := startLoops(cpus)
	if err != nil {
		t.Fatal(err)
	}
	return stop
}

// startLoops starts a busy loop pinned on each of cpus and returns what
// stops them; none is left running on an error.
func startLoops(cpus [2]int) (func(), error) {
	var loops []*exec.Cmd
	stop := func() {
		for _, c := range loops {
			c.Process.Kill()
			c.Wait()
		}
	}
	for _, cpu := range cpus {
		c := exec.Command("taskset", "-c", strconv.Itoa(cpu), "/bin/sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		loops = append(loops, c)
	}
	return stop, nil
}

// ompArms runs the program as it is and through the launcher, reps times
// each, in the order AB BA AB ..., and returns their median times per
// step (µs) and median CPU per step.
func ompArms(t *testing.T, prog string, cpus [2]int, steps, reps int) (plain, launched, plainCPU, launchedCPU float64) {
	t.Helper()
	var w, c [2][]float64
	for r := range reps {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, arm := range order {
			wu, cu := ompStep(t, prog, arm == 1, cpus, steps)
			w[arm], c[arm] = append(w[arm], wu), append(c[arm], cu)
		}
	}
	return resultstats.Median(w[0]), resultstats.Median(w[1]), resultstats.Median(c[0]), resultstats.Median(c[1])
}

// twoCPUs are the last two online CPUs, for a program and a busy loop on
// each (pinned with taskset).
func twoCPUs(t *testing.T) [2]int {
	t.Helper()
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skipf("taskset (util-linux) is needed to pin the program and the busy loops: %v", err)
	}
	online, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	if len(online) < 2 {
		t.Skipf("%d CPU online: the test needs two", len(online))
	}
	return [2]int{online[len(online)-2], online[len(online)-1]}
}

// TestLauncherBarriersUnderBusyLoops: an OpenMP program of barrier-heavy
// steps, two threads on two CPUs, each CPU shared with a busy loop. As it
// is, libgomp's threads spin up to 300,000 times at every wait (9 ms at
// 31 ns a spin on the development VM): a worker waiting out the master's
// 2 ms sleep burns its share of the CPU, which the busy loop then gets
// while the worker has work. Through hybridsync-run, which measures the
// CPUs contended, they spin a few wake-ups' worth, then sleep; alone it
// leaves libgomp's spin as it is. Asserted with wide margins, 2x faster
// beside the busy loops and at most 1.5x the time alone (where a noisy
// machine may make the launcher bound the spin: 1.13-1.21x on the
// development VM), on the medians of interleaved runs, measured once
// more if the verdict is wrong.
func TestLauncherBarriersUnderBusyLoops(t *testing.T) {
	prog := needGNUOpenMP(t)
	cpus := twoCPUs(t)
	const reps = 5
	contended := func() (float64, string) {
		stop := busyLoops(t, cpus)
		defer stop()
		w := disturbance.Start()
		plain, launched, pc, lc := ompArms(t, prog, cpus, 100, reps)
		f := w.Stop()
		return plain / launched, fmt.Sprintf("beside a busy loop on CPUs %v: as it is %.0f µs per step (CPU %.0f), through hybridsync-run %.0f (CPU %.0f): %.2fx faster; %s",
			cpus, plain, pc, launched, lc, plain/launched, f)
	}
	alone := func() (float64, string) {
		w := disturbance.Start()
		plain, launched, pc, lc := ompArms(t, prog, cpus, 300, reps)
		f := w.Stop()
		return launched / plain, fmt.Sprintf("alone on CPUs %v: as it is %.0f µs per step (CPU %.0f), through hybridsync-run %.0f (CPU %.0f): %.2fx the time; %s",
			cpus, plain, pc, launched, lc, launched/plain, f)
	}
	check := func(name string, measure func() (float64, string), ok func(float64) bool) {
		ratio, msg := measure()
		t.Log(msg)
		if !ok(ratio) {
			t.Logf("%s: measuring again once", name)
			ratio, msg = measure()
			t.Log(msg)
			if !ok(ratio) {
				t.Errorf("%s, twice: %s", name, msg)
			}
		}
	}
	check("not faster through hybridsync-run beside busy loops", contended, func(r float64) bool { return r >= 2 })
	check("much slower through hybridsync-run alone", alone, func(r float64) bool { return r <= 1.5 })
}

// TestLauncherModes: with HYBRIDSYNC_OPENMP unset (auto), the launcher
// measures nothing and gives libgomp the marker whose spin the library
// follows, whatever the CPUs' load (here a busy loop on each); =default
// never sets a wait; =live also preloads libomp after the library; a bad
// HYBRIDSYNC_OPENMP, or a live one without libomp, stops it with one line
// naming the variable, before the command runs.
func TestLauncherModes(t *testing.T) {
	need(t)
	cpus := twoCPUs(t)
	list := fmt.Sprintf("%d,%d", cpus[0], cpus[1])
	launch := func(env ...string) (string, string, int) {
		t.Helper()
		out, stderr, code, err := ompRun(time.Minute, env, "taskset", "-c", list, launcher(), "env")
		if code == -1 {
			t.Fatalf("hybridsync-run env: %v\n%s", err, stderr)
		}
		return out, stderr, code
	}
	run := func(setting string) (map[string]string, string) {
		t.Helper()
		out, stderr, code := launch("HYBRIDSYNC_OPENMP=" + setting)
		if code != 0 {
			t.Fatalf("hybridsync-run env: exit %d\n%s", code, stderr)
		}
		return envOf(out), stderr
	}
	stop := busyLoops(t, cpus)
	var marker string
	for _, mode := range []string{"auto", ""} {
		got, _ := run(mode)
		_, set := got["KMP_BLOCKTIME"]
		if marker == "" {
			marker = got["GOMP_SPINCOUNT"]
		}
		n, err := strconv.Atoi(got["GOMP_SPINCOUNT"])
		if err != nil || n <= openmp.GompSpinBounded || got["GOMP_SPINCOUNT"] != marker || set || got["HYBRIDSYNC_RUN_SET"] != "GOMP_SPINCOUNT="+marker {
			t.Errorf("HYBRIDSYNC_OPENMP=%q beside a busy loop on each CPU: GOMP_SPINCOUNT=%q KMP_BLOCKTIME=%q (set %v) HYBRIDSYNC_RUN_SET=%q, want the same marker spin count above the bound, only",
				mode, got["GOMP_SPINCOUNT"], got["KMP_BLOCKTIME"], set, got["HYBRIDSYNC_RUN_SET"])
		}
	}
	got, _ := run("default")
	if _, ok := got["GOMP_SPINCOUNT"]; ok {
		t.Errorf("HYBRIDSYNC_OPENMP=default set GOMP_SPINCOUNT=%s", got["GOMP_SPINCOUNT"])
	}
	stop()
	for _, env := range [][]string{{"HYBRIDSYNC_OPENMP=bogus"}, {"HYBRIDSYNC_OPENMP=live", "HYBRIDSYNC_LIBOMP=/nonexistent/libomp.so"},
		{"HYBRIDSYNC_OPENMP=live", "OMP_PROC_BIND=true"}} {
		name, _, _ := strings.Cut(env[len(env)-1], "=")
		out, stderr, code := launch(env...)
		if code != 2 || out != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, name) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 before the command, one line naming %s", env, code, out, stderr, name)
		}
	}
	libomp := libompOf(t)
	for _, env := range [][]string{{"HYBRIDSYNC_OPENMP=live"}, {"HYBRIDSYNC_OPENMP=live", "HYBRIDSYNC_LIBOMP=" + libomp}} {
		out, stderr, code := launch(env...)
		pre := strings.Fields(envOf(out)["LD_PRELOAD"])
		if code != 0 || len(pre) != 2 || !strings.HasSuffix(pre[0], "/libhybridsync.so.0") || !strings.Contains(pre[1], "libomp") {
			t.Errorf("%v: exit %d, LD_PRELOAD %q; want the library, then a libomp\n%s", env, code, pre, stderr)
		} else if len(env) > 1 && pre[1] != libomp {
			t.Errorf("%v: preloaded %s", env, pre[1])
		}
	}
}

// liveDoc is the part of the stats file TestBlocktimeLive reads.
type liveDoc struct {
	OpenMP *ompStats `json:"openmp"`
	Sched  struct {
		Seconds  float64 `json:"seconds"`
		RunDelay float64 `json:"run_delay_seconds"`
	} `json:"sched"`
	Outcomes *struct {
		Explorations uint64 `json:"explorations"`
		Team         uint64 `json:"team"`
	} `json:"outcomes"`
}

// contended: the library's signal put the waiting thread in the contended
// regime at some report (it explored, or saw a spinning team there).
func (d liveDoc) contended() bool {
	return d.Outcomes != nil && (d.Outcomes.Explorations > 0 || d.Outcomes.Team > 0)
}

// liveRun runs prog (ompbarrier) under the library for steps steps, two
// threads pinned to cpus, per step a 3 ms kernel waited on after 8 parallel regions (the
// master spins in CUDA's wait, the worker at libomp's barrier), and
// returns its stats. The program exits 1 if its regions summed wrong.
func liveRun(t *testing.T, prog string, cpus [2]int, steps int, env ...string) liveDoc {
	t.Helper()
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	bind := []string{"LD_PRELOAD=" + so, fmt.Sprintf("OMP_PLACES={%d},{%d}", cpus[0], cpus[1]), "OMP_PROC_BIND=true"}
	return liveRunVia(t, nil, prog, cpus, steps, append(bind, env...)...)
}

// liveRunVia is liveRun with the program started by the command via
// (the launcher), which preloads the library itself, and its threads
// bound by nothing but taskset's two CPUs (the launcher's live mode
// refuses OpenMP's binding).
func liveRunVia(t *testing.T, via []string, prog string, cpus [2]int, steps int, env ...string) liveDoc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stats.json")
	env = append([]string{"HYBRIDSYNC_STATS=" + path, "HYBRIDSYNC_OPENMP=auto", "OMP_NUM_THREADS=2", "OMPBARRIER_CUDA=3000"}, env...)
	args := append(append([]string{"-c", fmt.Sprintf("%d,%d", cpus[0], cpus[1])}, via...), prog, strconv.Itoa(steps), "8", "10", "10", "0")
	_, stderr, code, err := ompRun(3*time.Minute, env, "taskset", args...)
	if err != nil || code != 0 {
		t.Fatalf("%s under the library: %v (exit %d; 1 with FAIL: a wrong result)\n%s", prog, err, code, stderr)
	}
	if !strings.Contains(stderr, "ompbarrier threads 2 step_us") {
		t.Fatalf("%s: no result line:\n%s", prog, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("stats file: %v\n%s", err, stderr)
	}
	var d liveDoc
	if err := json.Unmarshal(b, &d); err != nil || d.OpenMP == nil || d.OpenMP.BlocktimeLive == nil {
		t.Fatalf("stats: %v, want an openmp object with blocktime_live:\n%s", err, b)
	}
	return d
}

// TestBlocktimeLive: a program on LLVM's libomp with the library
// preloaded. Beside a busy loop on each of its CPUs the library sets its
// blocktime to 0 (kmp_set_blocktime, on the thread that waits on the GPU
// and forks the regions) and the program's result stays right; alone on
// free CPUs it changes nothing; with KMP_BLOCKTIME set by the user, or
// OMP_WAIT_POLICY, never; a KMP_BLOCKTIME hybridsync-run set may be
// adapted; libgomp has no such call, which the stats say. Judged on the
// library's stats, not on timing; a run whose CPUs did not look as meant
// (the busy loops did not contend, or a busy machine contended the free
// run) is run again, up to three times.
func TestBlocktimeLive(t *testing.T) {
	llvm := needLLVMOpenMP(t)
	cpus := twoCPUs(t)
	const attempts = 3

	t.Run("beside busy loops", func(t *testing.T) {
		stop := busyLoops(t, cpus)
		defer stop()
		var d liveDoc
		for i := range attempts {
			d = liveRun(t, llvm, cpus, 300)
			if d.Sched.Seconds > 0 && d.Sched.RunDelay >= 0.1*d.Sched.Seconds {
				break
			}
			t.Logf("attempt %d: the master waited for its CPU %.2f s of %.2f s: not contended, run again", i+1, d.Sched.RunDelay, d.Sched.Seconds)
		}
		l := d.OpenMP.BlocktimeLive
		t.Logf("beside a busy loop on CPUs %v: %v; master's run delay %.2f s of %.2f s", cpus, l, d.Sched.RunDelay, d.Sched.Seconds)
		if d.OpenMP.Runtime != "libomp" || !l.Active || l.Threads < 1 || l.Changes < 1 || l.CurrentMS == nil || *l.CurrentMS != 0 ||
			l.OriginalMS == nil || *l.OriginalMS <= 0 {
			t.Errorf("runtime %s, %v: want libomp, active, its blocktime (libomp's default, over 0) set to 0 at least once", d.OpenMP.Runtime, l)
		}
	})

	t.Run("alone", func(t *testing.T) {
		for i := range attempts {
			d := liveRun(t, llvm, cpus, 300)
			l := d.OpenMP.BlocktimeLive
			if d.contended() {
				t.Logf("attempt %d: the machine contended the program's CPUs (%+v; %v): run again", i+1, *d.Outcomes, l)
				continue
			}
			t.Logf("alone on CPUs %v: %v", cpus, l)
			if !l.Active || l.Threads < 1 || l.Changes != 0 || l.OriginalMS == nil || l.CurrentMS == nil || *l.CurrentMS != *l.OriginalMS {
				t.Errorf("%v: want active, its blocktime read and never changed", l)
			}
			return
		}
		t.Skipf("the program's CPUs were contended in each of %d runs (a busy machine): nothing judged alone", attempts)
	})

	t.Run("the user's KMP_BLOCKTIME beside busy loops", func(t *testing.T) {
		stop := busyLoops(t, cpus)
		defer stop()
		// Fewer steps: beside the busy loops libomp's 200 ms spin makes
		// each step several times longer.
		for _, env := range [][]string{{"KMP_BLOCKTIME=200"}, {"OMP_WAIT_POLICY=active"}} {
			d := liveRun(t, llvm, cpus, 60, env...)
			l := d.OpenMP.BlocktimeLive
			name, _, _ := strings.Cut(env[0], "=")
			if l.Active || l.Changes != 0 || l.Threads != 0 || !strings.Contains(l.Why, name+" set by the user") {
				t.Errorf("%v: %v, want inactive, never changed, and why naming %s", env, l, name)
			}
		}
	})

	t.Run("hybridsync-run's KMP_BLOCKTIME", func(t *testing.T) {
		// HYBRIDSYNC_OPENMP=bounded (ompRun's): the launcher sets
		// KMP_BLOCKTIME=0, which the library may adapt; the program
		// starts with 0, so 0 is also what it goes back to.
		o := openmpOf(t, nil, launcher(), llvm, "50", "2", "5", "5")
		l := o.BlocktimeLive
		if l == nil || !l.Active || !slices.Contains(o.SetByHybridsyncRun, "KMP_BLOCKTIME") || l.OriginalMS == nil || *l.OriginalMS != 0 ||
			*l.CurrentMS != 0 {
			t.Errorf("%+v, %v: want active, from the launcher's 0", o, l)
		}
	})

	t.Run("a libgomp program on libomp, contended once started", func(t *testing.T) {
		// HYBRIDSYNC_OPENMP=live: the launcher finds the CPUs free and
		// sets nothing, but preloads libomp, which runs the GNU-built
		// program's regions; busy loops that come a second later get
		// its blocktime set to 0, which libgomp's spin could not.
		gnu := needGNUOpenMP(t)
		late := lateLoops(cpus, time.Second)
		defer late.stop()
		d := liveRunVia(t, []string{launcher()}, gnu, cpus, 600, "HYBRIDSYNC_OPENMP=live")
		l := d.OpenMP.BlocktimeLive
		t.Logf("runtime %s, %v; master's run delay %.2f s of %.2f s", d.OpenMP.Runtime, l, d.Sched.RunDelay, d.Sched.Seconds)
		late.check(t)
		// A machine busy at the start (other tests) makes the launcher's
		// probe set 0 itself; then 0 is what the loops keep.
		atStart := slices.Contains(d.OpenMP.SetByHybridsyncRun, "KMP_BLOCKTIME")
		if !strings.Contains(d.OpenMP.Runtime, "libomp") || !l.Active || (l.Changes < 1 && !atStart) || l.CurrentMS == nil || *l.CurrentMS != 0 {
			t.Errorf("runtime %s, %v, set by the launcher %v: want libomp, active, set to 0 once the loops came (or by the launcher)",
				d.OpenMP.Runtime, l, d.OpenMP.SetByHybridsyncRun)
		}
	})

	t.Run("libgomp", func(t *testing.T) {
		gnu := needGNUOpenMP(t)
		so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
		o := openmpOf(t, []string{"LD_PRELOAD=" + so}, gnu, "50", "2", "5", "5")
		if l := o.BlocktimeLive; l == nil || l.Active || l.Changes != 0 || !strings.HasPrefix(l.Why, "libgomp: ") {
			t.Errorf("libgomp: %v, want inactive and why naming libgomp", l)
		}
	})
}

// TestLauncherFollowsLateNeighbour: the launcher's default on a program
// of GNU libgomp, and on LLVM's libomp, whose CPUs are free at its start
// and each get a busy loop a second later. The launcher measures nothing
// at start; the library finds libgomp's spin count (libomp's blocktime)
// and bounds it once the loops come, which the stats' spin_live says
// (the setting it last made, and that it changed).
// Whether the spin goes back once the loops are gone is
// TestOMPFollowerLeaves' (hybridsync): on a busy machine the CPUs may
// never be free here.
func TestLauncherFollowsLateNeighbour(t *testing.T) {
	t.Run("libgomp", func(t *testing.T) {
		l, _ := followLate(t, needGNUOpenMP(t))
		if !l.Active || !strings.Contains(filepath.Base(l.Library), "libgomp") || l.SpinCount != openmp.GompSpinBounded || l.Changes < 1 || l.Contended < 1 {
			t.Errorf("spin_live %+v: want active on libgomp, bounded to %d once the loops came", l, openmp.GompSpinBounded)
		}
	})
	// libomp's blocktime is followed through the tools interface, and by
	// nothing else: the blocktime at the program's CUDA waits stands down.
	t.Run("libomp", func(t *testing.T) {
		l, o := followLate(t, needLLVMOpenMP(t))
		if !l.Active || l.Library == "" || l.BlocktimeMS != 0 || l.Changes < 1 || l.Contended < 1 {
			t.Errorf("spin_live %+v: want active on libomp, blocktime 0 once the loops came", l)
		}
		if b := o.BlocktimeLive; b != nil && b.Changes != 0 {
			t.Errorf("blocktime_live %v: changed libomp's blocktime beside the follower", b)
		}
	})
}

// followLate runs prog through the launcher on two CPUs where busy loops
// start a second after it: the run lasts well past their start (1000
// steps of a 3 ms kernel). It returns the stats' spin_live and openmp.
func followLate(t *testing.T, prog string) (ompSpin, *ompStats) {
	t.Helper()
	cpus := twoCPUs(t)
	late := lateLoops(cpus, time.Second)
	defer late.stop()
	d := liveRunVia(t, []string{launcher()}, prog, cpus, 1000, "HYBRIDSYNC_OPENMP=auto")
	late.check(t)
	o, l := d.OpenMP, d.OpenMP.SpinLive
	if l == nil {
		t.Fatalf("runtime %s, env %v: no spin_live in the stats", o.Runtime, o.Env)
	}
	t.Logf("runtime %s, GOMP_SPINCOUNT=%s: %+v", o.Runtime, o.Env["GOMP_SPINCOUNT"], *l)
	return *l, o
}

// late is a busy loop on each of two CPUs that starts after the program
// did (lateLoops).
type late struct {
	mu    sync.Mutex
	timer *time.Timer
	halt  func()
	err   error
}

// lateLoops starts a busy loop on each of cpus after d.
func lateLoops(cpus [2]int, d time.Duration) *late {
	l := &late{}
	l.timer = time.AfterFunc(d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.halt, l.err = startLoops(cpus)
	})
	return l
}

// check fails the test where the loops had not started by now (the run
// ended first).
func (l *late) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.halt == nil {
		t.Fatalf("the busy loops did not start within the run: %v", l.err)
	}
}

// stop stops the loops, or keeps them from starting.
func (l *late) stop() {
	l.timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.halt != nil {
		l.halt()
	}
}
