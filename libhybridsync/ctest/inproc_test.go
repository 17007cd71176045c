package ctest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
)

// The suite's in-process harnesses (experiments/apps/loop.h --inproc, and
// experiments/apps/inproc.py) with the real library on the stand-in: every
// round runs each of the three arms, the cuda-blocking arm really is
// CUDA's blocking mode (the stand-in's waits sleep: a fraction of the CPU
// per step of the default arm's, which spins), and the library counts as
// outcomes only the time of its own arm (its epochs pause while the CUDA
// arms run).

func TestInProcessHarness(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	path := filepath.Join(t.TempDir(), "stats.json")
	r, err := runErr([]string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path}, "inprocapp", "--inproc", "4", "--epoch-s", "0.1")
	if err != nil {
		t.Fatalf("inprocapp --inproc: %v\n%s", err, r.stderr)
	}
	checkInProcess(t, r.stdout, path, 4)

	// Not preloaded: one line, and a failure.
	r, err = runErr(nil, "inprocapp", "--inproc", "2")
	if err == nil || !strings.Contains(r.stderr, "hs_interpose not found") || r.stdout != "" {
		t.Errorf("without the library: err %v, stdout %q, stderr %q", err, r.stdout, r.stderr)
	}
}

func TestInProcessHarnessPython(t *testing.T) {
	need(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: experiments/apps/inproc.py is not tested (CI installs python3)")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	path := filepath.Join(t.TempDir(), "stats.json")
	script := filepath.Join(root, "experiments", "apps", "inproc.py")
	env := []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_STATS=" + path, "PYTHONPATH=" + filepath.Join(root, "libhybridsync", "testdata", "programs")}
	r, err := runErr(env, python, script, "standin_steps", "--rounds", "4", "--epoch-s", "0.1")
	if err != nil {
		t.Fatalf("inproc.py: %v\n%s", err, r.stderr)
	}
	checkInProcess(t, r.stdout, path, 4)

	r, err = runErr(env[1:], python, script, "standin_steps", "--rounds", "1")
	if err == nil || !strings.Contains(r.stderr, "hs_interpose not found") {
		t.Errorf("without the library: err %v, stderr %q", err, r.stderr)
	}
	r, err = runErr(env, python, script, "no_such_module")
	if err == nil || !strings.Contains(r.stderr, "no_such_module: no build()") {
		t.Errorf("no such module: err %v, stderr %q", err, r.stderr)
	}
}

// checkInProcess checks a harness's JSON line (stdout) and the library's
// stats file.
func checkInProcess(t *testing.T, stdout, stats string, rounds int) {
	t.Helper()
	var res struct {
		WallS  float64 `json:"wall_s"`
		Rounds []struct {
			Round int     `json:"round"`
			Arm   string  `json:"arm"`
			Steps int     `json:"steps"`
			WallS float64 `json:"wall_s"`
			CPUS  float64 `json:"cpu_s"`
		} `json:"rounds"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("result line: %v: %q", err, stdout)
	}
	if len(res.Rounds) != 3*rounds {
		t.Fatalf("%d records, want %d: %s", len(res.Rounds), 3*rounds, stdout)
	}
	arms := map[int]map[string]bool{}
	cpuShare := map[string][]float64{}
	hsWall := 0.0
	for _, x := range res.Rounds {
		if arms[x.Round] == nil {
			arms[x.Round] = map[string]bool{}
		}
		arms[x.Round][x.Arm] = true
		if x.Steps <= 0 || x.WallS < 0.1 {
			t.Errorf("record %+v: want steps, and at least --epoch-s", x)
		}
		cpuShare[x.Arm] = append(cpuShare[x.Arm], x.CPUS/x.WallS)
		if x.Arm == "hybridsync" {
			hsWall += x.WallS
		}
	}
	for round, a := range arms {
		if len(a) != 3 || !a["cuda-default"] || !a["cuda-blocking"] || !a["hybridsync"] {
			t.Errorf("round %d ran %v, want each arm once", round, a)
		}
	}
	med := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
	if b, d := med(cpuShare["cuda-blocking"]), med(cpuShare["cuda-default"]); b > 0.6*d {
		t.Errorf("CPU per wall second: cuda-blocking %.2f, cuda-default %.2f; want blocking's waits to sleep", b, d)
	}
	counted := epochSeconds(t, stats)
	// Warm-up and the untimed step after each switch add a little.
	if counted > 1.2*hsWall+0.1 {
		t.Errorf("the library counted %.3f s of epochs, its arm ran %.3f s (the run %.3f s): the CUDA arms were counted", counted, hsWall, res.WallS)
	}
}

// TestInProcessArmsChosen: APPS_INPROC_ARMS (experiments/apps/diag/arms.sh)
// picks the arms of both harnesses, and over six rounds each of three arms
// runs twice in each place of the round (the balanced order); an unknown
// arm is an error.
func TestInProcessArmsChosen(t *testing.T) {
	need(t)
	env, harnesses := inprocHarnesses(t, 6, "0.02")
	for name, cmd := range harnesses {
		r, err := runErr(append(env, "APPS_INPROC_ARMS=cuda-default,cuda-default-again,hooks-observe"), cmd[0], cmd[1:]...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, r.stderr)
		}
		var res struct {
			Rounds []struct{ Arm string } `json:"rounds"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%s: result line: %v: %q", name, err, r.stdout)
		}
		place := map[string][3]int{}
		for i, x := range res.Rounds {
			p := place[x.Arm]
			p[i%3]++
			place[x.Arm] = p
		}
		want := [3]int{2, 2, 2}
		if len(res.Rounds) != 18 || len(place) != 3 || place["cuda-default"] != want || place["cuda-default-again"] != want || place["hooks-observe"] != want {
			t.Errorf("%s: %d records, arms by place in the round %v; want each of the three arms twice in each place", name, len(res.Rounds), place)
		}
		r, err = runErr(append(env, "APPS_INPROC_ARMS=cuda-default,no-such-arm"), cmd[0], cmd[1:]...)
		if err == nil || !strings.Contains(r.stderr, "APPS_INPROC_ARMS") || r.stdout != "" {
			t.Errorf("%s, an unknown arm: err %v, stdout %q, stderr %q", name, err, r.stdout, r.stderr)
		}
	}
}

// TestInProcessArmTablesAgree: the in-process arms are listed three times,
// once per language that runs them: loop.h's table (the C programs, its
// hook sets from hybridsync.h), inproc.py's (the Python programs) and
// the suite's product arms (Go, experiments/apps/suite), which must be the
// harnesses' default arms. Each arm must mean the same everywhere: the
// same hooks, the same schedule.
func TestInProcessArmTablesAgree(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: inproc.py's table cannot be read (CI installs python3)")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "armtable.c")
	prog := `#include "loop.h"
int main(void)
{
	printf("{\"default\":%d,\"hooks\":[%d,%d],\"arms\":{", INPROC_DEFAULT_ARMS, HS_HOOK_OBSERVE, HS_HOOK_ALL);
	for (int i = 0; i < INPROC_MAX_ARMS; i++)
		printf("%s\"%s\":[%d,%d]", i ? "," : "", inproc_arm_table[i].name, inproc_arm_table[i].hooks, inproc_arm_table[i].blocking);
	printf("},\"order\":[");
	for (int i = 0; i < INPROC_MAX_ARMS; i++)
		printf("%s\"%s\"", i ? "," : "", inproc_arm_table[i].name);
	printf("]}\n");
	return 0;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	appsDir := filepath.Join(root, "experiments", "apps")
	if err := sh(dir, "gcc", "-O0", "-Wall", "-Wno-unused-function", "-Werror", "-I"+appsDir, "-o", "armtable", src, "-ldl"); err != nil {
		t.Fatal(err)
	}
	type table struct {
		Default int               `json:"default"`
		Hooks   [2]int            `json:"hooks"`
		Arms    map[string][2]int `json:"arms"`
		Order   []string          `json:"order"`
	}
	var c, py table
	r, err := runErr(nil, filepath.Join(dir, "armtable"))
	if err != nil {
		t.Fatalf("armtable: %v\n%s", err, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
		t.Fatalf("loop.h's table: %v: %q", err, r.stdout)
	}
	dump := `import inproc, json
print(json.dumps({"default": len(inproc.ARMS), "hooks": [inproc.HOOK_OBSERVE, inproc.HOOK_ALL], "order": inproc.ARMS,
                  "arms": {k: [h, int(b)] for k, (h, b) in inproc.ARM_SETUP.items()}}))`
	r, err = runErr([]string{"PYTHONPATH=" + appsDir}, python, "-c", dump)
	if err != nil {
		t.Fatalf("inproc.py's table: %v\n%s", err, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &py); err != nil {
		t.Fatalf("inproc.py's table: %v: %q", err, r.stdout)
	}
	if c.Default > len(c.Order) || !slices.Equal(c.Order[:c.Default], py.Order) || !slices.Equal(py.Order, suite.Arms) {
		t.Errorf("default arms: loop.h %v, inproc.py %q, experiments/apps/suite %q", c.Order[:min(c.Default, len(c.Order))], py.Order, suite.Arms)
	}
	if !maps.Equal(c.Arms, py.Arms) || c.Hooks != py.Hooks {
		t.Errorf("arms (hooks, blocking): loop.h %v, inproc.py %v; hook sets (observe, all): hybridsync.h %v, inproc.py %v", c.Arms, py.Arms, c.Hooks, py.Hooks)
	}
}

// TestInProcessUnmitigatedArms: started with a 100 µs slice (as the
// agent's --mitigate gives a program from its start), both harnesses run
// the arms named in APPS_INPROC_UNMITIGATED with the kernel's default
// slice and the others with 100 µs, as each round's slice_ns says; the
// process ends with its slice as it began.
func TestInProcessUnmitigatedArms(t *testing.T) {
	need(t)
	const slice = 100_000
	env, harnesses := inprocHarnesses(t, 2, "0.02")
	env = append(env, "APPS_INPROC_UNMITIGATED=cuda-default,cuda-blocking")
	for name, cmd := range harnesses {
		var r result
		err := withSlice(t, slice, func() (err error) {
			r, err = runErr(env, cmd[0], cmd[1:]...)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, r.stderr)
		}
		var res struct {
			Rounds []struct {
				Arm     string `json:"arm"`
				SliceNs uint64 `json:"slice_ns"`
			} `json:"rounds"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Rounds) != 6 {
			t.Fatalf("%s: result line (%v): %q", name, err, r.stdout)
		}
		for _, x := range res.Rounds {
			if mitigated := x.Arm == "hybridsync"; (x.SliceNs == slice) != mitigated || x.SliceNs == 0 {
				t.Errorf("%s: arm %s ran with slice %d ns; want %d only in hybridsync, the kernel's default in the others", name, x.Arm, x.SliceNs, slice)
			}
		}
	}
}

// withSlice runs start, which starts a process and waits for it, from a
// thread with the EEVDF slice sliceNs, so that the process has it from
// its start; it skips the test on a kernel without custom slices.
func withSlice(t *testing.T, sliceNs uint64, start func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		// The thread ends with the goroutine (never unlocked): its slice
		// is not handed back to the runtime.
		runtime.LockOSThread()
		a, err := unix.SchedGetAttr(0, 0)
		if err == nil {
			a.Runtime, a.Flags, a.Deadline, a.Period = sliceNs, 0, 0, 0
			err = unix.SchedSetAttr(0, a, 0)
		}
		if err == nil {
			if a, err = unix.SchedGetAttr(0, 0); err == nil && a.Runtime != sliceNs {
				err = fmt.Errorf("slice read back %d ns", a.Runtime)
			}
		}
		if err != nil {
			errc <- fmt.Errorf("custom EEVDF slices not available here (Linux 6.12+): %w", err)
			return
		}
		errc <- nil
		errc <- start()
	}()
	if err := <-errc; err != nil {
		t.Skip(err)
	}
	return <-errc
}

// TestInProcessCPUBusy: pinned to one CPU beside a busy loop, both
// harnesses record how long that CPU was busy in each round, at least
// their own CPU time, and the loop's part shows (over a fifth of the
// wall time in the median round); not pinned, they record nothing.
func TestInProcessCPUBusy(t *testing.T) {
	need(t)
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("taskset (util-linux) not found: the harnesses cannot be pinned here")
	}
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for i := range 1024 {
		if cpus.IsSet(i) {
			cpu = i
		}
	}
	loop := exec.Command(taskset, "-c", fmt.Sprint(cpu), "sh", "-c", "while :; do :; done")
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { loop.Process.Kill(); loop.Wait() }()

	env, harnesses := inprocHarnesses(t, 2, "0.3")
	type round struct {
		WallS    float64  `json:"wall_s"`
		CPUS     float64  `json:"cpu_s"`
		CPUBusyS *float64 `json:"cpu_busy_s"`
	}
	rounds := func(name string, argv ...string) []round {
		r, err := runErr(env, argv[0], argv[1:]...)
		var res struct{ Rounds []round }
		if err != nil || json.Unmarshal([]byte(r.stdout), &res) != nil || len(res.Rounds) != 6 {
			t.Fatalf("%s: %v: %q\n%s", name, err, r.stdout, r.stderr)
		}
		return res.Rounds
	}
	const tick = 0.02 // /proc/stat's clock ticks, both ends
	for name, argv := range harnesses {
		var others []float64
		for _, x := range rounds(name, append([]string{taskset, "-c", fmt.Sprint(cpu)}, argv...)...) {
			if x.CPUBusyS == nil || *x.CPUBusyS < x.CPUS-tick || *x.CPUBusyS > x.WallS+tick {
				t.Errorf("%s pinned: round %+v (busy %v): want the CPU busy at least the program's CPU time and at most the wall time", name, x, x.CPUBusyS)
				continue
			}
			others = append(others, (*x.CPUBusyS-x.CPUS)/x.WallS)
		}
		if sort.Float64s(others); len(others) > 0 && others[len(others)/2] < 0.2 {
			t.Errorf("%s pinned beside a busy loop: others' shares %.2f, want the loop's part to show", name, others)
		}
		t.Logf("%s: others' shares of the wall time %.2f", name, others)
		if cpus.Count() > 1 {
			for _, x := range rounds(name+" not pinned", argv...) {
				if x.CPUBusyS != nil {
					t.Errorf("%s not pinned: round recorded busy %v", name, *x.CPUBusyS)
				}
			}
		}
	}
}

// inprocHarnesses returns the environment both harnesses need (the
// library preloaded, the Python stand-in's module path) and their command
// lines for rounds rounds of epochS seconds: the C stand-in's and, where
// python3 is, inproc.py's.
func inprocHarnesses(t *testing.T, rounds int, epochS string) (env []string, cmds map[string][]string) {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	env = []string{"LD_PRELOAD=" + so, "PYTHONPATH=" + filepath.Join(root, "libhybridsync", "testdata", "programs")}
	n := fmt.Sprint(rounds)
	cmds = map[string][]string{"C": {filepath.Join(built.dir, "inprocapp"), "--inproc", n, "--epoch-s", epochS}}
	if python, err := exec.LookPath("python3"); err == nil {
		cmds["Python"] = []string{python, filepath.Join(root, "experiments", "apps", "inproc.py"), "standin_steps", "--rounds", n, "--epoch-s", epochS}
	}
	return env, cmds
}
