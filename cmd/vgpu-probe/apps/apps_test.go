package apps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

func TestMain(m *testing.M) {
	reexec.Init()
	if os.Getenv("APPS_STANDIN") != "" {
		os.Exit(standinMain())
	}
	os.Exit(m.Run())
}

var sink uint64

// standinMain is a stand-in for a GPU program: a fixed amount of CPU work,
// then the one JSON line. It records where it ran (CPU affinity, cgroup,
// LD_PRELOAD) in a file under --info, for the tests to check.
func standinMain() int {
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	work := fs.Int("work", 10_000_000, "loop iterations")
	cpuMs := fs.Int("cpu-ms", 0, "loop until this much CPU time is used (instead of --work): as long on a fast machine as on a slow one")
	info := fs.String("info", "", "directory for a file about this run")
	fail := fs.Bool("fail", false, "exit 3")
	failPreloaded := fs.String("fail-preloaded", "", "exit 4 when LD_PRELOAD contains this")
	nojson := fs.Bool("nojson", false, "print no JSON line")
	badjson := fs.Bool("badjson", false, "print a result line with a negative wall_s")
	hang := fs.Bool("hang", false, "sleep for a minute")
	seconds := fs.Float64("seconds", 0, "recorded only")
	epoch := fs.Float64("epoch-s", 0, "recorded only")
	ready := fs.String("ready", "", "write the info file, then this line to stderr, wait 300 ms, and go on")
	childCgroup := fs.String("child-cgroup", "", "before the ready line, start a child that writes its cgroup to this file 1 s later; wait for it at the end")
	rounds := fs.Int("rounds", 0, "print this many rounds of the arms in APPS_INPROC_ARMS (or the three), as inproc.py does, with wall times (round+1) x 1.1 (default and default-again), 1.2 (blocking), 1.0 (hybridsync)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *childCgroup != "" {
		child := exec.Command("sh", "-c", "sleep 1; cat /proc/self/cgroup > "+*childCgroup)
		if err := child.Start(); err != nil {
			return 5
		}
		defer child.Wait()
	}
	if *ready != "" {
		writeInfo(*info, "before-", *seconds, *epoch)
		fmt.Fprintln(os.Stderr, *ready)
		time.Sleep(300 * time.Millisecond)
	}
	writeInfo(*info, "", *seconds, *epoch)
	writeAgentInfo(*info)
	if s := os.Getenv("HYBRIDSYNC_STATS"); s != "" {
		os.WriteFile(s, []byte("{}\n"), 0o644)
	}
	if *fail {
		fmt.Fprintln(os.Stderr, "standin: failing as asked")
		return 3
	}
	if *failPreloaded != "" && strings.Contains(os.Getenv("LD_PRELOAD"), *failPreloaded) {
		return 4
	}
	if *hang {
		time.Sleep(time.Minute)
	}
	cpu := func() float64 {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
		return float64(ts.Nano()) / 1e9
	}
	t0, c0 := time.Now(), cpu()
	x := sink | 1
	steps := 0
	for steps < *work || (*cpuMs > 0 && cpu()-c0 < float64(*cpuMs)/1e3) {
		for range 100_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		steps += 100_000
	}
	sink = x
	wall, c := time.Since(t0).Seconds(), cpu()-c0
	if *nojson {
		fmt.Println("done, no JSON here")
		return 0
	}
	if *badjson {
		fmt.Println(`{"program":"standin","wall_s":-1,"cpu_s":0}`)
		return 0
	}
	if *rounds > 0 {
		factor := map[string]float64{"cuda-default": 1.1, "cuda-blocking": 1.2, "hybridsync": 1.0, "cuda-default-again": 1.1}
		arms := []string{"hybridsync", "cuda-blocking", "cuda-default"}
		if v := os.Getenv("APPS_INPROC_ARMS"); v != "" {
			arms = strings.Split(v, ",") // as inproc.py and loop.h take it
		}
		var rs []suite.Round
		for r := range *rounds {
			for _, arm := range arms {
				rs = append(rs, suite.Round{Round: r, Arm: arm, Steps: 100, WallS: float64(r+1) * factor[arm], CPUS: c})
			}
		}
		b, _ := json.Marshal(map[string]any{"program": "standin", "steps": steps, "wall_s": wall, "cpu_s": c, "rounds": rs})
		fmt.Println(string(b))
		return 0
	}
	fmt.Printf("{\"program\":\"standin\",\"steps\":%d,\"wall_s\":%.6f,\"cpu_s\":%.6f}\n", steps, wall, c)
	return 0
}

// writeInfo records where the stand-in runs now (CPU affinity, cgroup,
// environment) in dir/PREFIX<pid>.json; nothing without dir.
func writeInfo(dir, prefix string, seconds, epoch float64) {
	if dir == "" {
		return
	}
	var set unix.CPUSet
	unix.SchedGetaffinity(0, &set)
	var cpus []int
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	cg, _ := os.ReadFile("/proc/self/cgroup")
	b, _ := json.Marshal(map[string]any{
		"cpus": cpus, "cgroup": string(cg), "ld_preload": os.Getenv("LD_PRELOAD"),
		"stats": os.Getenv("HYBRIDSYNC_STATS"), "seconds": seconds, "epoch_s": epoch, "reexec": os.Getenv("VGPU_PROBE_REEXEC"),
	})
	os.WriteFile(filepath.Join(dir, prefix+strconv.Itoa(os.Getpid())+".json"), b, 0o644)
}

// standin returns a --program value that runs the stand-in with args.
func standin(t *testing.T, name string, args ...string) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// GORACE: a race-enabled binary otherwise sleeps a second at exit.
	return name + "=env APPS_STANDIN=1 GORACE=atexit_sleep_ms=0 " + self + " " + strings.Join(args, " ")
}

// shims returns two preloadable libraries with different names standing in
// for blocksync.so and libhybridsync.so: the real blocksync.c built with gcc
// (it finds no libcuda here, says so on stderr and changes nothing), or
// empty files that the dynamic loader ignores with a warning.
func shims(t *testing.T) (blocksync, lib string) {
	dir := t.TempDir()
	blocksync, lib = filepath.Join(dir, "blocksync.so"), filepath.Join(dir, "libhybridsync.so")
	src := filepath.Join("..", "..", "..", "advise", "blocksync", "blocksync.c")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", blocksync, src, "-ldl").CombinedOutput(); err != nil {
		t.Logf("gcc blocksync.c: %v %s; using empty files as shims", err, out)
		os.WriteFile(blocksync, nil, 0o644)
	}
	b, _ := os.ReadFile(blocksync)
	os.WriteFile(lib, b, 0o644)
	return blocksync, lib
}

type infoFile struct {
	CPUs      []int   `json:"cpus"`
	Cgroup    string  `json:"cgroup"`
	LDPreload string  `json:"ld_preload"`
	Stats     string  `json:"stats"`
	Seconds   float64 `json:"seconds"`
	Epoch     float64 `json:"epoch_s"`
	Reexec    string  `json:"reexec"`
}

func readInfos(t *testing.T, dir string) []infoFile {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []infoFile
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var i infoFile
		if err := json.Unmarshal(b, &i); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, i)
	}
	return out
}

func mustReadRuns(t *testing.T, path string) []suite.Run {
	t.Helper()
	runs, err := apptable.ReadRuns([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// canCap reports whether the cap settings can run here, and says why not.
func canCap(t *testing.T) bool {
	if os.Geteuid() != 0 {
		t.Log("not root: the cap settings are not tested (CI runs as root)")
		return false
	}
	if _, err := cpucap.Detect(); err != nil {
		t.Logf("no cgroup cpu controller: the cap settings are not tested: %v", err)
		return false
	}
	return true
}

// checkNothingLeft fails if a child process of the test or the apps cgroup
// is still there.
func checkNothingLeft(t *testing.T) {
	t.Helper()
	me := os.Getpid()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		if len(f) > 1 && f[1] == strconv.Itoa(me) {
			t.Errorf("child process left behind: %s: %.80s", s, b)
		}
	}
	for _, d := range []string{filepath.Join(cpucap.Root, fmt.Sprintf("vgpu-probe-apps-%d", me)), filepath.Join(cpucap.Root, "cpu", fmt.Sprintf("vgpu-probe-apps-%d", me))} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup left behind: %s", d)
		}
	}
}

// decodeApps decodes what apps --json printed: the results document,
// nothing but its fields, with its apps part.
func decodeApps(t *testing.T, stdout string) suite.Summary {
	t.Helper()
	var doc results.File
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil || doc.Apps == nil || doc.Kind != results.KindApps {
		t.Fatalf("--json: not a results document with an apps part (%v):\n%s", err, stdout)
	}
	return *doc.Apps
}

func execute(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	cmd := NewCmd(nil)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(ctx)
	return o.String(), e.String(), err
}

// TestRunMatrix runs the whole matrix with a stand-in program for real:
// every arm under every contention setting (the cap ones as root), 3
// repetitions, and checks the interleaving, what each run saw (pinned to
// the one CPU, in the cgroup under cap, the arm's LD_PRELOAD and stats
// file), that the co-runner and the cap took CPU from the program, the
// table and JSON, and that nothing is left behind.
func TestRunMatrix(t *testing.T) {
	blocksync, lib := shims(t)
	contention := []string{"none", "while1"}
	if canCap(t) {
		contention = append(contention, "cap", "cap+while1")
	}
	info, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	const reps = 3
	// 200 ms of CPU: ten periods of the cap, whatever the machine's speed.
	stdout, stderr, err := execute(context.Background(), "--program", standin(t, "burn", "--info", info, "--work", "0", "--cpu-ms", "200"),
		"--lib", lib, "--blocksync", blocksync, "--contention", strings.Join(contention, ","),
		"--reps", strconv.Itoa(reps), "--seconds", "1.5", "--out", out, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	checkNothingLeft(t)

	sum := decodeApps(t, stdout)
	if len(sum.Results) != len(contention) || len(sum.Failures) != 0 {
		t.Fatalf("%d rows, %d failures, want %d and 0: %s", len(sum.Results), len(sum.Failures), len(contention), stdout)
	}
	share := map[string]float64{}
	for i, row := range sum.Results {
		if row.Program != "burn" || row.Contention != contention[i] || len(row.Arms) != 3 {
			t.Errorf("row %d: %+v", i, row)
		}
		for j, a := range row.Arms {
			if a.Arm != suite.Arms[j] || a.Runs != reps || a.Failed != 0 || a.Ratio == nil || a.WallS <= 0 {
				t.Errorf("%s/%s: %+v", row.Contention, a.Arm, a)
			}
		}
		if row.Best == "" || row.HSWithin3Pct == nil || row.HSNotSlower == nil {
			t.Errorf("%s: no verdict: %+v", row.Contention, row)
		}
		if row.Contention == "none" {
			fastest := math.Inf(1)
			for _, a := range row.Arms {
				fastest = min(fastest, *a.Ratio)
			}
			if math.Abs(fastest-1) > 1e-9 {
				t.Errorf("the fastest arm alone has ratio %v, want 1 (the reference)", fastest)
			}
		}
		share[row.Contention] = row.Arms[0].CPUS / row.Arms[0].WallS
	}
	// The program gets at most half the CPU against a busy loop on it, and
	// at most 10 ms per 20 ms under the cap.
	for _, c := range contention[1:] {
		if share[c] > 0.8 {
			t.Errorf("under %s the program had %.0f%% of the CPU: the contention did not reach it", c, share[c]*100)
		}
	}

	// The results document: a cell per setting and arm, each good run a
	// repetition, slowdowns against the fastest arm alone.
	doc, err := results.Read(filepath.Join(out, results.Name))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Kind != results.KindApps || len(doc.Cells) != len(contention)*3 || !doc.Config.PerStep {
		t.Fatalf("results.json: kind %q, %d cells, per step %v", doc.Kind, len(doc.Cells), doc.Config.PerStep)
	}
	ones := 0
	for _, c := range doc.Cells {
		if c.Program != "burn" || len(c.Reps) != reps || c.Slowdown < 1 {
			t.Errorf("cell %+v: %d reps, slowdown %v", c.Key, len(c.Reps), c.Slowdown)
		}
		if c.Scenario == "none" && c.Slowdown == 1 {
			ones++
		}
		if c.Scenario == "while1" && c.Slowdown < 1.2 {
			t.Errorf("%+v: slowdown %.2f under a busy loop on its CPU", c.Key, c.Slowdown)
		}
	}
	if ones != 1 {
		t.Errorf("%d cells alone have slowdown 1, want the fastest one alone", ones)
	}

	runs := mustReadRuns(t, filepath.Join(out, "runs.jsonl"))
	if len(runs) != reps*len(contention)*3 {
		t.Fatalf("%d runs in runs.jsonl", len(runs))
	}
	first := map[string]map[string]bool{}
	for i, r := range runs {
		cell := i / 3
		wantRep, wantCont := cell/len(contention), contention[cell%len(contention)]
		if r.Rep != wantRep || r.Contention != wantCont || r.Order != i%3 || !r.OK() {
			t.Errorf("run %d: %+v, want rep %d %s order %d", i, r, wantRep, wantCont, i%3)
		}
		if r.Order == 0 {
			if first[r.Contention] == nil {
				first[r.Contention] = map[string]bool{}
			}
			first[r.Contention][r.Arm] = true
		}
		if (r.Arm == "hybridsync") != (r.Stats != "") {
			t.Errorf("run %d: arm %s, stats %q", i, r.Arm, r.Stats)
		}
		if r.Stats != "" && r.Stats != filepath.Join(out, "stats", fmt.Sprintf("burn-%s-%d.json", r.Contention, r.Rep+1)) {
			t.Errorf("stats file %s", r.Stats)
		}
	}
	for c, arms := range first {
		if len(arms) != 3 {
			t.Errorf("under %s only %v ran first: the order does not rotate", c, arms)
		}
	}

	infos := readInfos(t, info)
	if len(infos) != len(runs) {
		t.Fatalf("%d stand-in runs recorded, want %d", len(infos), len(runs))
	}
	perArm := map[string]int{}
	capped := 0
	for _, in := range infos {
		if len(in.CPUs) != 1 || in.CPUs[0] != sum.CPU {
			t.Errorf("program ran on CPUs %v, want only %d", in.CPUs, sum.CPU)
		}
		if in.Seconds != 1.5 || in.Reexec != "" {
			t.Errorf("program got --seconds %v, VGPU_PROBE_REEXEC %q", in.Seconds, in.Reexec)
		}
		switch {
		case in.LDPreload == "" && in.Stats == "":
			perArm["cuda-default"]++
		case in.LDPreload == blocksync && in.Stats == "":
			perArm["cuda-blocking"]++
		case in.LDPreload == lib && strings.HasPrefix(in.Stats, filepath.Join(out, "stats")):
			perArm["hybridsync"]++
		default:
			t.Errorf("unexpected environment: LD_PRELOAD %q HYBRIDSYNC_STATS %q", in.LDPreload, in.Stats)
		}
		if strings.Contains(in.Cgroup, fmt.Sprintf("vgpu-probe-apps-%d", os.Getpid())) {
			capped++
		}
	}
	n := reps * len(contention)
	if perArm["cuda-default"] != n || perArm["cuda-blocking"] != n || perArm["hybridsync"] != n {
		t.Errorf("runs per arm %v, want %d each", perArm, n)
	}
	if wantCapped := reps * 3 * (len(contention) - 2); capped != wantCapped {
		t.Errorf("%d runs in the cap cgroup, want %d", capped, wantCapped)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.json")); err != nil {
		t.Error(err)
	}
	if got := strings.Count(stderr, "] rep "); got != len(runs) {
		t.Errorf("%d progress lines for %d runs:\n%s", got, len(runs), stderr)
	}

	// The table: one header and one line per contention setting.
	stdout, stderr, err = execute(context.Background(), "--program", standin(t, "burn", "--work", "1000"),
		"--arms", "cuda-default,hybridsync", "--lib", lib, "--contention", "none,while1", "--reps", "1", "--out", filepath.Join(t.TempDir(), "o"))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "program") || !strings.Contains(lines[0], "hybridsync wall") ||
		strings.Contains(lines[0], "cuda-blocking") || !strings.HasPrefix(lines[1], "burn") || !strings.Contains(lines[1], "1.00 [1.00-1.00]") {
		t.Errorf("table:\n%s", stdout)
	}
	checkNothingLeft(t)
}

// TestFailures: a run that exits non-zero or prints a malformed result
// line is recorded with its error, left out of the medians, listed, and
// the command fails after printing the table; nothing is left behind. The
// time limit is far above what the stand-ins need: on a busy machine, two
// race-built processes pinned to a CPU shared with a busy loop (the stub,
// then the program) take 0.3-1.1 s to start, and a 2 s limit killed
// programs that were about to exit (exit status -1).
func TestFailures(t *testing.T) {
	blocksync, _ := shims(t)
	out := filepath.Join(t.TempDir(), "out")
	stdout, stderr, err := execute(context.Background(),
		"--program", standin(t, "ok", "--work", "1000"),
		"--program", standin(t, "exits", "--fail"),
		"--program", standin(t, "malformed", "--badjson"),
		"--program", standin(t, "noblock", "--work", "1000", "--fail-preloaded", "blocksync"),
		"--arms", "cuda-default,cuda-blocking", "--blocksync", blocksync,
		"--contention", "none,while1", "--reps", "2", "--timeout", "2m", "--out", out)
	if err == nil || errors.Is(err, usage.ErrBadInput) || !strings.Contains(err.Error(), "20 of 32 runs failed") {
		t.Fatalf("err = %v", err)
	}
	checkNothingLeft(t)
	for _, want := range []string{"exit status 3: standin: failing as asked", "want wall_s > 0", "exit status 4"} {
		if !strings.Contains(stderr, "FAILED") || !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 1+4*2 {
		t.Fatalf("table:\n%s", stdout)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		failed := f[len(f)-1]
		switch f[0] {
		case "ok":
			if failed != "0" {
				t.Errorf("ok failed: %s", l)
			}
		case "noblock":
			// cuda-default is measured, cuda-blocking failed twice.
			if failed != "2" || !strings.Contains(l, "cuda-default") {
				t.Errorf("noblock: %s", l)
			}
		default:
			if failed != "4" || !strings.Contains(l, " - ") {
				t.Errorf("%s: %s", f[0], l)
			}
		}
	}
	var sum suite.Summary
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Failures) != 20 {
		t.Errorf("%d failures in summary.json", len(sum.Failures))
	}
	for _, row := range sum.Results {
		if row.Program == "noblock" && (row.Arms[0].Runs != 2 || row.Arms[1].Runs != 0 || row.Arms[1].Failed != 2 || row.Best != "cuda-default") {
			t.Errorf("noblock %s: %+v", row.Contention, row)
		}
	}
	runs := mustReadRuns(t, filepath.Join(out, "runs.jsonl"))
	firstOfRep := map[int]string{}
	for _, r := range runs {
		if r.Program == "exits" && r.ExitStatus != 3 {
			t.Errorf("exit status %d recorded, want 3", r.ExitStatus)
		}
		if _, ok := firstOfRep[r.Rep]; !ok {
			firstOfRep[r.Rep] = r.Program
		}
	}
	// Programs rotate too: each repetition starts with the next one.
	if firstOfRep[0] != "ok" || firstOfRep[1] != "exits" {
		t.Errorf("repetitions start with %v, want ok then exits", firstOfRep)
	}
}

// Every run failed: no results document, which would read as a result;
// the command fails in one line that says where the runs are.
func TestAllFailed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, _, err := execute(context.Background(), "--program", standin(t, "exits", "--fail"),
		"--arms", "cuda-default", "--contention", "none", "--reps", "1", "--timeout", "2m", "--out", out)
	if err == nil || !strings.Contains(err.Error(), "every run failed (exits under none, cuda-default: exit status 3") ||
		!strings.Contains(err.Error(), "no results.json written") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "results.json")); err == nil {
		t.Error("results.json written")
	}
	checkNothingLeft(t)
}

// TestSummaryUnwritable: a summary.json that cannot be written (a
// directory is in its place) fails the command in one line, and leaves
// no partial file.
func TestSummaryUnwritable(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	if err := os.MkdirAll(filepath.Join(out, "summary.json", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err := execute(context.Background(), "--program", standin(t, "ok", "--work", "1000"),
		"--arms", "cuda-default", "--contention", "none", "--reps", "1", "--timeout", "2m", "--out", out)
	if err == nil || errors.Is(err, usage.ErrBadInput) || !strings.Contains(err.Error(), "write summary") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v, want one line saying the summary was not written", err)
	}
	t.Log(err)
	es, _ := os.ReadDir(out)
	for _, e := range es {
		if e.Name() != "runs.jsonl" && e.Name() != "stats" && e.Name() != "summary.json" {
			t.Errorf("left in --out: %s", e.Name())
		}
	}
}

// TestTimeout: a run past --timeout is killed with its process group,
// recorded as timed out, and left out like any failure.
func TestTimeout(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	start := time.Now()
	_, stderr, err := execute(context.Background(), "--program", standin(t, "hangs", "--hang"),
		"--arms", "cuda-default", "--contention", "while1", "--reps", "1", "--timeout", "2s", "--out", out)
	if err == nil || !strings.Contains(err.Error(), "every run failed (hangs under while1, cuda-default: timed out after 2s)") || !strings.Contains(stderr, "timed out after 2s") {
		t.Fatalf("err = %v, stderr:\n%s", err, stderr)
	}
	// The stand-in sleeps a minute.
	if d := time.Since(start); d > 45*time.Second {
		t.Errorf("took %v: not stopped at its time limit", d)
	}
	checkNothingLeft(t)
	runs := mustReadRuns(t, filepath.Join(out, "runs.jsonl"))
	if len(runs) != 1 || !strings.Contains(runs[0].Error, "timed out") {
		t.Errorf("runs %+v", runs)
	}
}

// TestInProcess: a suite entry that compares the arms inside one process
// runs once per repetition and setting, preloaded with --lib, and its
// rounds become runs paired by round: the stand-in's hybridsync rounds
// take 1/1.1 of its default ones and 1/1.2 of its blocking ones in every
// round, though rounds differ by up to 4x.
func TestInProcess(t *testing.T) {
	blocksync, lib := shims(t)
	dir, info, out := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "out")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	suiteFile := filepath.Join(dir, "suite.json")
	cmd := "env APPS_STANDIN=1 GORACE=atexit_sleep_ms=0 " + self + " --work 1000 --rounds 4 --info " + info
	b, _ := json.Marshal([]map[string]any{{"name": "ab", "command": cmd, "in_process": true}, {"name": "plain", "command": cmd}})
	os.WriteFile(suiteFile, b, 0o644)
	contention := []string{"none", "while1"}
	if canCap(t) {
		contention = append(contention, "cap")
	}
	stdout, stderr, err := execute(context.Background(), "--suite", suiteFile, "--only", "ab", "--lib", lib, "--blocksync", blocksync,
		"--contention", strings.Join(contention, ","), "--cap-period", "40ms", "--cap-quota", "20ms",
		"--reps", "2", "--seconds", "1", "--out", out, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	checkNothingLeft(t)
	sum := decodeApps(t, stdout)
	for _, row := range sum.Results {
		d, bl := row.HSVsDefaultPaired, row.HSVsBestCUDAPaired
		if d == nil || bl == nil || d.N != 8 || math.Abs(d.Median-1/1.1) > 1e-6 || math.Abs(bl.Median-1/1.1) > 1e-6 || row.Best != "hybridsync" {
			t.Errorf("%s: paired vs default %+v, vs the better mode %+v, best %s; want n 8, 1/1.1 both, hybridsync", row.Contention, d, bl, row.Best)
		}
	}
	runs := mustReadRuns(t, filepath.Join(out, "runs.jsonl"))
	if len(runs) != 2*len(contention)*4*3 {
		t.Fatalf("%d runs, want one per arm, round, setting and repetition (%d)", len(runs), 2*len(contention)*4*3)
	}
	for _, r := range runs {
		if r.Round < 1 || r.Round > 4 || r.Order > 2 || (r.Arm == "hybridsync") != (r.Stats != "") {
			t.Errorf("run %+v", r)
		}
	}
	infos := readInfos(t, info)
	if len(infos) != 2*len(contention) {
		t.Fatalf("%d processes, want one per setting and repetition (%d)", len(infos), 2*len(contention))
	}
	for _, in := range infos {
		if in.LDPreload != lib || in.Seconds != 0 {
			t.Errorf("LD_PRELOAD %q, --seconds %v; want --lib %s, and no --seconds (the program times its rounds)", in.LDPreload, in.Seconds, lib)
		}
		// 0.3 s per arm, or under the cap the nearest whole number of
		// its 40 ms periods (8).
		want := 0.3
		if strings.Contains(in.Cgroup, "vgpu-probe-apps") {
			want = 0.32
		}
		if in.Epoch != want {
			t.Errorf("--epoch-s %v in cgroup %q, want %v", in.Epoch, strings.TrimSpace(in.Cgroup), want)
		}
	}

	// An in-process program needs the hybridsync arm, and must print rounds.
	_, _, err = execute(context.Background(), "--suite", suiteFile, "--only", "ab", "--blocksync", blocksync, "--arms", "cuda-default,cuda-blocking", "--out", filepath.Join(t.TempDir(), "o"))
	if !errors.Is(err, usage.ErrBadInput) || !strings.Contains(err.Error(), "must include hybridsync") {
		t.Errorf("without the hybridsync arm: %v", err)
	}
	norounds := strings.Replace(cmd, "--rounds 4", "", 1)
	b, _ = json.Marshal([]map[string]any{{"name": "ab", "command": norounds, "in_process": true}})
	os.WriteFile(suiteFile, b, 0o644)
	_, stderr, err = execute(context.Background(), "--suite", suiteFile, "--lib", lib, "--contention", "none", "--reps", "1", "--out", filepath.Join(t.TempDir(), "o"))
	if err == nil || !strings.Contains(stderr, "no \"rounds\"") {
		t.Errorf("a program without rounds: err %v, stderr %s", err, stderr)
	}
}

// TestAAArm: the A/A arm, cuda-default run once more, is run as the
// default is, by separate processes and by an in-process program (which
// is told the arms asked for), and the table pairs it with the default.
func TestAAArm(t *testing.T) {
	blocksync, lib := shims(t)
	info, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	suiteFile := filepath.Join(t.TempDir(), "suite.json")
	cmd := strings.SplitN(standin(t, "x", "--work", "1000", "--info", info), "=", 2)[1]
	b, _ := json.Marshal([]map[string]any{{"name": "ab", "command": cmd + " --rounds 4", "in_process": true}, {"name": "plain", "command": cmd}})
	os.WriteFile(suiteFile, b, 0o644)
	stdout, stderr, err := execute(context.Background(), "--suite", suiteFile, "--lib", lib, "--blocksync", blocksync,
		"--arms", "cuda-default,hybridsync,cuda-default-again", "--contention", "none", "--reps", "3", "--out", out, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	sum := decodeApps(t, stdout)
	want := map[string]int{"ab": 12, "plain": 3} // rounds, repetitions
	for _, row := range sum.Results {
		aa := row.AAPaired
		if aa == nil || aa.N != want[row.Program] || (row.Program == "ab" && aa.Median != 1) {
			t.Errorf("%s: A/A %+v, want n %d (and 1 in process)", row.Program, aa, want[row.Program])
		}
	}
	for _, r := range mustReadRuns(t, filepath.Join(out, "runs.jsonl")) {
		if r.Arm == "cuda-blocking" {
			t.Errorf("run of an arm not asked for: %+v", r)
		}
		if r.Arm == "cuda-default-again" && r.Stats != "" {
			t.Errorf("the A/A arm ran with the library's stats: %+v", r)
		}
	}
	for _, in := range readInfos(t, info) {
		if in.LDPreload != "" && in.LDPreload != lib {
			t.Errorf("LD_PRELOAD %q", in.LDPreload)
		}
	}
}

// TestInterrupt: Ctrl-C (a cancelled context) in the middle of a run under
// cap+while1 kills the program and the co-runner and removes the cgroup.
func TestInterrupt(t *testing.T) {
	contention := "while1"
	if canCap(t) {
		contention = "cap+while1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	out := filepath.Join(t.TempDir(), "out")
	start := time.Now()
	_, _, err := execute(ctx, "--program", standin(t, "hangs", "--hang"), "--arms", "cuda-default",
		"--contention", contention, "--reps", "1", "--out", out)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("took %v to stop", time.Since(start))
	}
	checkNothingLeft(t)
}

func TestBadInput(t *testing.T) {
	blocksync, lib := shims(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"programs": [`), 0o644)
	os.WriteFile(filepath.Join(dir, "empty.json"), []byte(`[]`), 0o644)
	os.WriteFile(filepath.Join(dir, "noname.json"), []byte(`[{"command":"true"}]`), 0o644)
	os.WriteFile(filepath.Join(dir, "notexec"), []byte("x"), 0o644)
	ok := "p=true"
	both := []string{"--lib", lib, "--blocksync", blocksync}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--program", ok, "--arms", "cuda-default,fast"}, `unknown arm "fast"`},
		{[]string{"--program", ok, "--arms", "cuda-default,cuda-default"}, "given twice"},
		{[]string{"--program", ok, "--arms", "cuda-default", "--contention", "none,noisy"}, `unknown setting "noisy"`},
		{[]string{"--program", ok}, "needs --blocksync"},
		{[]string{"--program", ok, "--arms", "hybridsync"}, "needs --lib"},
		{[]string{"--program", ok, "--arms", "hybridsync", "--lib", filepath.Join(dir, "nope.so")}, "--lib"},
		{append([]string{"--program", "p=no-such-program-here"}, both...), "not found"},
		{append([]string{"--program", "p=./no-such"}, both...), "not found"},
		{append([]string{"--program", "p=./notexec", "--dir", dir}, both...), "not an executable"},
		{append([]string{"--program", "p=sh missing.sh", "--dir", dir}, both...), "missing.sh: not found"},
		{append([]string{"--program", "p"}, both...), "want NAME=COMMAND"},
		{append([]string{"--program", "a b=true"}, both...), "program name"},
		{append([]string{"--program", ok, "--program", ok}, both...), "given twice"},
		{append([]string{"--program", "p=sh -c 'x"}, both...), "unterminated"},
		{append([]string{"--program", "p="}, both...), "empty command"},
		{both, "no programs"},
		{append([]string{"--suite", filepath.Join(dir, "bad.json")}, both...), "--suite"},
		{append([]string{"--suite", filepath.Join(dir, "empty.json")}, both...), "no programs"},
		{append([]string{"--suite", filepath.Join(dir, "noname.json")}, both...), "needs a name"},
		{append([]string{"--suite", filepath.Join(dir, "absent.json")}, both...), "--suite"},
		{append([]string{"--program", ok, "--reps", "0"}, both...), "--reps"},
		{append([]string{"--program", ok, "--only", "q"}, both...), `unknown program "q"`},
		{append([]string{"--program", ok, "--cpu", "100000"}, both...), "--cpu"},
		{append([]string{"--program", ok, "--dir", filepath.Join(dir, "nodir")}, both...), "--dir"},
		{append([]string{"--program", ok, "--cap-quota", "30ms"}, both...), "--cap-quota"},
		{append([]string{"--program", ok, "--timeout", "0s"}, both...), "--timeout"},
	} {
		ran := false
		cmd := NewCmd(func(context.Context, *Options) error { ran = true; return nil })
		cmd.SetArgs(tc.args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if !errors.Is(err, usage.ErrBadInput) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || ran {
			t.Errorf("%q: err = %v, want a one-line bad-input error with %q", tc.args, err, tc.want)
		}
	}
	// An --out that already holds results is refused before anything runs.
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "runs.jsonl"), []byte("{}\n"), 0o644)
	_, _, err := execute(context.Background(), "--program", ok, "--arms", "cuda-default", "--out", out)
	if !errors.Is(err, usage.ErrBadInput) {
		t.Errorf("existing results: err = %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "runs.jsonl")); string(b) != "{}\n" {
		t.Errorf("existing results overwritten: %q", b)
	}
}

// TestFlags maps the flags onto the suite's matrix: defaults, and --only
// picking programs of --suite in the suite's order (the others are not
// resolved, so they need not exist).
func TestFlags(t *testing.T) {
	var got *Options
	cmd := NewCmd(func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--program", `x=sh -c "exit 0" 'a b'`, "--arms", "cuda-default", "--seconds", "0.5"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if len(got.Contention) != 4 || got.Reps != 5 || got.CPU < 0 || got.Seconds != 0.5 || len(got.Programs) != 1 || got.Programs[0].Command != `sh -c "exit 0" 'a b'` {
		t.Errorf("defaults: %+v", got)
	}
	dir := t.TempDir()
	suiteFile := filepath.Join(dir, "suite.json")
	os.WriteFile(suiteFile, []byte(`{"programs": [{"name": "a", "command": "true"}, {"name": "b", "command": "./absent"}, {"name": "c", "command": "sh -c :", "seconds": false}]}`), 0o644)
	cmd = NewCmd(func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--suite", suiteFile, "--only", "c,a", "--arms", "cuda-default", "--dir", dir})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if names := got.Names(); fmt.Sprint(names) != "[a c]" {
		t.Errorf("--only: %v", names)
	}
}

// TestReadyLine: a program that names a ready line starts outside the
// contention setting and runs the rest inside it (in the cap cgroup, as
// root); one that never writes its line is a failed run, and nothing is
// left behind either way.
func TestReadyLine(t *testing.T) {
	contention := "while1"
	if canCap(t) {
		contention = "cap+while1"
	}
	info, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	childFile := filepath.Join(info, "child.cgroup")
	cmdOf := func(args ...string) string {
		return strings.SplitN(standin(t, "x", append([]string{"--info", info, "--work", "1000000"}, args...)...), "=", 2)[1]
	}
	suiteFile, _ := json.Marshal([]map[string]string{
		{"name": "late", "command": cmdOf("--ready", "READY-NOW", "--child-cgroup", childFile), "ready": "READY-NOW"},
		{"name": "never", "command": cmdOf(), "ready": "READY-NOW"},
	})
	sf := filepath.Join(t.TempDir(), "suite.json")
	os.WriteFile(sf, suiteFile, 0o644)
	_, stderr, err := execute(context.Background(), "--suite", sf, "--arms", "cuda-default", "--contention", contention,
		"--reps", "1", "--out", out)
	if err == nil || !strings.Contains(stderr, "never wrote its ready line") {
		t.Fatalf("err %v, want the run of 'never' failed for its missing ready line; stderr:\n%s", err, stderr)
	}
	checkNothingLeft(t)
	for _, r := range mustReadRuns(t, filepath.Join(out, "runs.jsonl")) {
		if r.Program == "late" && !r.OK() {
			t.Errorf("late: %s", r.Error)
		}
	}
	if !strings.HasPrefix(contention, "cap") {
		return
	}
	before, _ := filepath.Glob(filepath.Join(info, "before-*.json"))
	if len(before) != 1 {
		t.Fatalf("info files before the ready line: %v", before)
	}
	pid := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(before[0]), "before-"), ".json")
	inGroup := func(f string) bool {
		var i infoFile
		b, _ := os.ReadFile(f)
		json.Unmarshal(b, &i)
		return strings.Contains(i.Cgroup, fmt.Sprintf("vgpu-probe-apps-%d", os.Getpid()))
	}
	if inGroup(before[0]) || !inGroup(filepath.Join(info, pid+".json")) {
		t.Errorf("in the cap cgroup before the ready line: %v; after: %v; want only after",
			inGroup(before[0]), inGroup(filepath.Join(info, pid+".json")))
	}
	// What the program started before its ready line is under the cap too
	// (a wrapper's engine: GROMACS's mdrun under gromacs.py).
	if cg, _ := os.ReadFile(childFile); !strings.Contains(string(cg), fmt.Sprintf("vgpu-probe-apps-%d", os.Getpid())) {
		t.Errorf("the program's child, started before its ready line, is in cgroup %q, not the cap's", strings.TrimSpace(string(cg)))
	}
}

// TestFrom prints the table of earlier runs, two files taken together,
// and refuses what is not a runs.jsonl with one line.
func TestFrom(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, runs ...suite.Run) string {
		var b bytes.Buffer
		for _, r := range runs {
			j, _ := json.Marshal(r)
			b.Write(append(j, '\n'))
		}
		path := filepath.Join(dir, name)
		os.WriteFile(path, b.Bytes(), 0o644)
		return path
	}
	run := func(c, arm string, rep int, wall float64) suite.Run {
		return suite.Run{Program: "p", Contention: c, Arm: arm, Rep: rep, WallS: wall, CPUS: wall, Steps: 100}
	}
	a := write("a.jsonl", run("none", "cuda-default", 0, 1), run("none", "hybridsync", 0, 1.01),
		run("while1", "cuda-default", 0, 2), run("while1", "hybridsync", 0, 1.5))
	// b's repetition 0 ran at another time: it pairs within b only (a
	// cuda-default run of b with a's hybridsync would give 1.5/3).
	b := write("b.jsonl", run("while1", "cuda-default", 0, 3), run("while1", "hybridsync", 0, 2.4))
	stdout, _, err := execute(context.Background(), "--from", a+","+b)
	if err != nil {
		t.Fatal(err)
	}
	// while1 by repetition: 1.5/2 and 2.4/3, median 0.775; by medians 1.95/2.5 = 0.78.
	if !strings.Contains(stdout, "paired") || !strings.Contains(strings.Join(strings.Fields(stdout), " "), "p while1 2.50 [2.00-3.00] 2.500 1.95 [1.50-2.40] 1.950 hybridsync -22.0% -22.0% -22.5% [-25.0,-20.0] / -22.5% [-25.0,-20.0] 2 (50%) open: >3% behind the better CUDA mode, slower than default 0") {
		t.Errorf("table:\n%s", stdout)
	}
	stdout, _, err = execute(context.Background(), "--from", a, "--json")
	var doc results.File
	if err != nil || json.Unmarshal([]byte(stdout), &doc) != nil || doc.Apps == nil || len(doc.Apps.Results) != 2 || doc.Apps.Results[1].HSVsDefaultPaired == nil || math.Abs(doc.Apps.Results[1].HSVsDefaultPaired.Median-0.75) > 1e-9 {
		t.Errorf("--json: %v %s", err, stdout)
	}

	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"program":"p","arm":"hybridsync","contention":"none"}`+"\n{not json\n"), 0o644)
	empty := write("empty.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", filepath.Join(dir, "absent.jsonl")}, "absent.jsonl"},
		{[]string{"--from", bad}, "bad.jsonl:2: not a run"},
		{[]string{"--from", empty}, "no runs"},
		{[]string{"--from", a, "--program", "p=true"}, "runs nothing"},
	} {
		_, _, err := execute(context.Background(), tc.args...)
		if !errors.Is(err, usage.ErrBadInput) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: err = %v, want a one-line bad-input error with %q", tc.args, err, tc.want)
		}
	}
}

// TestTimed: programs that print no result line are timed from outside,
// for real: `sleep 0.2` takes at least 0.2 s of wall time; a shell that
// runs two children each burning 0.2 s of CPU and waits for them is
// charged their 0.4 s; a shell that leaves a process running after it
// exits (a subshell that reaped a child which burned 0.3 s) is charged
// that too. A program that prints its JSON line keeps its own figures.
func TestTimed(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	burn := func(ms int) string {
		return fmt.Sprintf("env APPS_STANDIN=1 GORACE=atexit_sleep_ms=0 %s --nojson --cpu-ms %d", self, ms)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	_, stderr, err := execute(context.Background(),
		"--program", "nap=sleep 0.2",
		"--program", fmt.Sprintf("tree=sh -c '%s & %s; wait'", burn(200), burn(200)),
		"--program", fmt.Sprintf("left=sh -c '(%s; touch left.done; exec sleep 60) >/dev/null 2>&1 & while [ ! -e left.done ]; do sleep 0.02; done'", burn(300)),
		"--program", standin(t, "json", "--work", "1000"),
		"--arms", "cuda-default", "--contention", "none", "--reps", "1", "--dir", dir, "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	checkNothingLeft(t)
	if !strings.Contains(stderr, "no result line: the whole process tree") {
		t.Errorf("the log does not say how the runs were timed:\n%s", stderr)
	}
	runs := map[string]suite.Run{}
	for _, r := range mustReadRuns(t, filepath.Join(out, "runs.jsonl")) {
		runs[r.Program] = r
	}
	for name, minCPU := range map[string]float64{"nap": 0, "tree": 0.4, "left": 0.3} {
		r := runs[name]
		if !r.OK() || !r.Timed || r.Steps != 0 || r.WallS <= 0 || r.CPUS < minCPU {
			t.Errorf("%s: %+v, want a timed run of cpu_s >= %v", name, r, minCPU)
		}
		t.Logf("%s: wall %.3f s, cpu %.3f s", name, r.WallS, r.CPUS)
	}
	if r := runs["nap"]; r.WallS < 0.2 {
		t.Errorf("sleep 0.2 timed at %.3f s", r.WallS)
	}
	if r := runs["json"]; !r.OK() || r.Timed || r.Steps < 1000 {
		t.Errorf("json: %+v, want its own result line's figures", r)
	}
}
