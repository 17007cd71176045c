package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite/suitetest"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// TestSettingNames: a setting of bench on one CPU, or with xN on N, and
// a busy loop's pattern after a dash; a bad N, an unknown setting or a
// pattern without busy loops is an error naming it.
func TestSettingNames(t *testing.T) {
	for name, want := range map[string]setting{
		"none":             {"none", "none", 1, ""},
		"cap+while1":       {"cap+while1", "cap+while1", 1, ""},
		"nonex2":           {"nonex2", "none", 2, ""},
		"while1x4":         {"while1x4", "while1", 4, ""},
		"capx16":           {"capx16", "cap", 16, ""},
		"cap+while1x3":     {"cap+while1x3", "cap+while1", 3, ""},
		"while1x4-late":    {"while1x4-late", "while1", 4, "late"},
		"while1-1s":        {"while1-1s", "while1", 1, "1s"},
		"cap+while1x2-10s": {"cap+while1x2-10s", "cap+while1", 2, "10s"},
		"while1x4-start":   {"while1x4-start", "while1", 4, "start"},
	} {
		if got, err := parseSetting(name); err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, want)
		}
	}
	for name, want := range map[string]string{
		"while1x1": "on one CPU it is while1", "while1x0": "want xN", "while1x04": "want xN", "nonex": "unknown setting",
		"while1xa": "want xN", "noisy": "unknown setting", "x2": "unknown setting", "matmulx2": "unknown setting",
		"while1x2000": "at most 1024", "nonex4-late": "only a setting with busy loops", "capx2-1s": "only a setting with busy loops",
		"while1x4-2s": "want xN",
	} {
		if _, err := parseSetting(name); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it with %q", name, err, want)
		}
	}
	if err := CheckSettings([]string{"while1x2", "while1x2"}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a setting twice: %v", err)
	}
	names := []string{"while1x2", "cap", "nonex4", "none", "nonex2", "noisy", "while1"}
	sortSettings(names)
	if want := []string{"none", "while1", "cap", "noisy", "nonex2", "while1x2", "nonex4"}; !slices.Equal(names, want) {
		t.Errorf("sorted %v, want %v", names, want)
	}
	if !Alone("none") || !Alone("nonex8") || Alone("while1x8") || Alone("cap") {
		t.Error("Alone: want none and nonexN only")
	}
}

// fakeLauncher writes suitetest's stand-in for hybridsync-run under dir.
func fakeLauncher(t *testing.T, dir string) (lib string) {
	return suitetest.Launcher(t, dir, LauncherName)
}

func readStandinInfos(t *testing.T, dir string) []standinInfo {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []standinInfo
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var in standinInfo
		if err := json.Unmarshal(b, &in); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, in)
	}
	return out
}

// TestSettingOnNCPUs runs a stand-in program for real alone and beside
// busy loops on 2 CPUs (nonex2, while1x2) in the default arms and the
// OpenMP and launcher arms, with OpenMP wait variables set in the suite's
// environment. Every thread of the program may run on exactly the 2 CPUs;
// beside the busy loops, one thread of the co-runner is pinned on each
// of them and runs; each arm gets the environment it promises (the
// OpenMP arms their one setting and none of the suite's, the launcher's
// arm runs the launcher found beside --lib, with no OpenMP variable);
// runs, table and results document name the settings and the arms.
func TestSettingOnNCPUs(t *testing.T) {
	online, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	if len(online) < 2 {
		t.Skipf("this process may use %d CPU: the settings on 2 CPUs need 2 (CI has 2)", len(online))
	}
	want := online[len(online)-2:]
	t.Setenv("OMP_WAIT_POLICY", "ACTIVE")
	t.Setenv("GOMP_SPINCOUNT", "77")
	t.Setenv("KMP_BLOCKTIME", "5")
	info, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	arms := []string{"cuda-default", "cuda-default-again", "omp-passive", "omp-spin1k", "hybridsync-run", "hybridsync-run-live"}
	settings := []string{"nonex2", "while1x2"}
	var log bytes.Buffer
	c := Config{Programs: []Program{{Name: "omp", Command: standinCommand(t, "--info", info), CPUs: 2}},
		Dir: ".", Arms: arms, Contention: settings, Reps: 1, CPU: -1, Lib: fakeLauncher(t, t.TempDir()),
		Timeout: 2 * time.Minute, CapQuota: 10 * time.Millisecond, CapPeriod: 20 * time.Millisecond, Log: &log}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if c.Launcher != LauncherFor(c.Lib) || !strings.HasSuffix(c.Launcher, "/bin/"+LauncherName) {
		t.Errorf("launcher %q: want the one beside --lib's folder", c.Launcher)
	}
	runs, err := c.Run(context.Background(), out)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(runs) != len(arms)*len(settings) {
		t.Fatalf("%d runs, want %d:\n%s", len(runs), len(arms)*len(settings), log.String())
	}
	if !strings.Contains(log.String(), "OMP_WAIT_POLICY=ACTIVE") {
		t.Errorf("the log does not say which OpenMP variables the other arms pass on:\n%s", log.String())
	}
	for _, r := range runs {
		if !r.OK() || !slices.Equal(r.OnCPUs, want) {
			t.Errorf("run %s %s: error %q, on CPUs %v; want %v", r.Contention, r.Arm, r.Error, r.OnCPUs, want)
		}
		if wantStats := launched(r.Arm); (r.Stats != "") != wantStats || (wantStats && !strings.HasSuffix(r.Stats, "omp-"+strings.TrimPrefix(r.Arm, "hybridsync-")+"-"+r.Contention+"-1.json")) {
			t.Errorf("run %s %s: stats %q", r.Contention, r.Arm, r.Stats)
		}
	}

	infos := readStandinInfos(t, info)
	if len(infos) != len(runs) {
		t.Fatalf("%d stand-in runs recorded, want %d", len(infos), len(runs))
	}
	count := map[string]int{}
	for _, in := range infos {
		for _, th := range in.Threads {
			if !slices.Equal(th, want) {
				t.Errorf("a thread of the program may run on CPUs %v, want %v", th, want)
			}
		}
		setting := "nonex2"
		if len(in.Busy) > 0 {
			setting = "while1x2"
			var pinned []int
			for _, th := range in.Busy {
				if len(th.CPUs) == 1 {
					pinned = append(pinned, th.CPUs[0])
					if th.RanNs <= 0 {
						t.Errorf("the busy loop pinned on CPU %d did not run in 300 ms", th.CPUs[0])
					}
				}
			}
			slices.Sort(pinned)
			if !slices.Equal(pinned, want) {
				t.Errorf("busy loops pinned on CPUs %v, want one on each of %v", pinned, want)
			}
		}
		env := in.Env
		arm := "?"
		switch {
		case env["FAKE_LAUNCHER"] == "1":
			arm = "hybridsync-run"
			if env["HYBRIDSYNC_OPENMP"] == "live" {
				arm = "hybridsync-run-live"
			}
			if env["FAKE_LAUNCHER_SAW"] != "" || env["HYBRIDSYNC_STATS"] == "" {
				t.Errorf("launcher's arm: the launcher got OpenMP variables %q, stats %q; want none, and a stats file", env["FAKE_LAUNCHER_SAW"], env["HYBRIDSYNC_STATS"])
			}
		case env["OMP_WAIT_POLICY"] == "PASSIVE":
			arm = "omp-passive"
			if _, ok := env["GOMP_SPINCOUNT"]; ok || env["KMP_BLOCKTIME"] != "" {
				t.Errorf("omp-passive with %v", env)
			}
		case env["GOMP_SPINCOUNT"] == "1000":
			arm = "omp-spin1k"
			if _, ok := env["OMP_WAIT_POLICY"]; ok || env["KMP_BLOCKTIME"] != "" {
				t.Errorf("omp-spin1k with %v", env)
			}
		case env["OMP_WAIT_POLICY"] == "ACTIVE" && env["GOMP_SPINCOUNT"] == "77" && env["KMP_BLOCKTIME"] == "5":
			arm = "cuda-default"
		}
		if env["LD_PRELOAD"] != os.Getenv("LD_PRELOAD") || (!launched(arm) && env["HYBRIDSYNC_STATS"] != "") {
			t.Errorf("%s: LD_PRELOAD %q, HYBRIDSYNC_STATS %q", arm, env["LD_PRELOAD"], env["HYBRIDSYNC_STATS"])
		}
		count[setting+" "+arm]++
	}
	for _, s := range settings {
		for _, a := range []string{"cuda-default", "omp-passive", "omp-spin1k", "hybridsync-run", "hybridsync-run-live"} {
			n := map[bool]int{true: 2, false: 1}[a == "cuda-default"] // and cuda-default-again
			if count[s+" "+a] != n {
				t.Errorf("%s %s: %d runs with its environment, want %d (all: %v)", s, a, count[s+" "+a], n, count)
			}
		}
	}

	// The table and the results document name the settings and the arms.
	var table bytes.Buffer
	if err := apptable.PrintTable(&table, apptable.Summarize(runs, c.Names(), settings, arms)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "omp nonex2 ") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "omp while1x2 ") {
		t.Errorf("table, want a row per setting:\n%s", table.String())
	}
	for _, h := range []string{"omp-passive wall", "omp-spin1k wall", "hybridsync-run wall", "hybridsync-run-live wall", "A/A paired", "vs default paired"} {
		if !strings.Contains(lines[0], h) {
			t.Errorf("table header lacks %q:\n%s", h, lines[0])
		}
	}
	for _, a := range []string{"omp-passive +0.0%", "omp-spin1k +0.0%", "hybridsync-run +0.0%"} {
		if !strings.Contains(lines[2], a) {
			t.Errorf("while1x2 row lacks %q:\n%s", a, lines[2])
		}
	}
	doc := ResultsFile(runs, c.Names(), settings, arms, 1, c.CapQuota, c.CapPeriod, results.ThisMachine())
	if !slices.Equal(doc.Config.Scenarios, []string{"none", "while1"}) || !slices.Equal(doc.Config.VCPUs, []int{2}) || len(doc.Cells) != len(runs) {
		t.Fatalf("results: scenarios %v, vCPUs %v, %d cells", doc.Config.Scenarios, doc.Config.VCPUs, len(doc.Cells))
	}
	for _, cell := range doc.Cells {
		if cell.VCPUs != 2 || cell.RunnerVCPUs != 2 || cell.Slowdown != 1 {
			t.Errorf("cell %+v: runner vCPUs %d, slowdown %v; want 2 vCPUs against the runs alone on 2", cell.Key, cell.RunnerVCPUs, cell.Slowdown)
		}
	}
}

// TestLauncherArm: the hybridsync-run arm finds the launcher beside
// --lib's folder (lib/ or lib/ARCH/ under a prefix) or takes --launcher,
// and without one fails in one line that says where it looked and how
// to get one; programs compared in one process cannot take the arms
// that OpenMP reads at load.
func TestLauncherArm(t *testing.T) {
	prefix := t.TempDir()
	lib := fakeLauncher(t, prefix)
	c := func(lib, launcher string, arms ...string) *Config {
		return &Config{Programs: []Program{{Name: "x", Command: "true"}}, Dir: ".", Arms: arms, Contention: []string{"none"},
			Reps: 1, CPU: -1, Lib: lib, Launcher: launcher, Timeout: time.Second, CapQuota: time.Millisecond, CapPeriod: time.Millisecond}
	}
	multiarch := filepath.Join(prefix, "lib", "x86_64-linux-gnu", "libhybridsync.so")
	for _, lib := range []string{lib, multiarch} {
		cfg := c(lib, "", "cuda-default", "hybridsync-run")
		if err := cfg.Check(); err != nil || cfg.Launcher != filepath.Join(prefix, "bin", LauncherName) {
			t.Errorf("--lib %s: launcher %q, %v; want %s/bin/%s", lib, cfg.Launcher, err, prefix, LauncherName)
		}
	}
	given := filepath.Join(prefix, "bin", LauncherName)
	if cfg := c("", given, "hybridsync-run"); cfg.Check() != nil || cfg.Launcher != given {
		t.Errorf("--launcher %s: %q", given, cfg.Launcher)
	}
	elsewhere := filepath.Join(t.TempDir(), "lib", "libhybridsync.so")
	for _, cfg := range []*Config{c(elsewhere, "", "hybridsync-run"), c("", "", "cuda-default", "hybridsync-run"),
		c(lib, filepath.Join(prefix, "lib"), "hybridsync-run"), c(lib, lib, "hybridsync-run")} {
		err := cfg.Check()
		if err == nil || !strings.Contains(err.Error(), "hybridsync-run arm needs the library's launcher") || strings.Contains(err.Error(), "\n") {
			t.Errorf("--lib %q --launcher %q: %v; want one line saying the arm needs the launcher", cfg.Lib, cfg.Launcher, err)
		}
	}
	// Not asked for: no launcher needed.
	if err := c(elsewhere, "", "cuda-default").Check(); err != nil {
		t.Errorf("without the arm: %v", err)
	}

	for _, arm := range separateOnly {
		cfg := c(lib, "", "hybridsync", arm)
		cfg.Programs[0].InProcess = true
		if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "compares the arms in one process") || !strings.Contains(err.Error(), arm) {
			t.Errorf("an in-process program in %s: %v", arm, err)
		}
	}
}

// TestRealLauncher runs the stand-in in the hybridsync-run arm through
// the library's own launcher (libhybridsync/hybridsync-run.in, as `make
// lib` fills it in for build/bin) beside an empty library: the program
// gets the library preloaded.
func TestRealLauncher(t *testing.T) {
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "..", "libhybridsync", "hybridsync-run.in"))
	if err != nil {
		t.Skipf("no launcher template: %v", err)
	}
	prefix := t.TempDir()
	lib := fakeLauncher(t, prefix)
	script := strings.NewReplacer("@LIBDIR@", "../lib", "@SONAME@", "libhybridsync.so").Replace(string(tmpl))
	if err := os.WriteFile(filepath.Join(prefix, "bin", LauncherName), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMP_SPINCOUNT", "77")
	info := t.TempDir()
	c := Config{Programs: []Program{{Name: "omp", Command: standinCommand(t, "--info", info)}}, Dir: ".",
		Arms: []string{"hybridsync-run"}, Contention: []string{"none"}, Reps: 1, CPU: -1, Lib: lib,
		Timeout: time.Minute, CapQuota: time.Millisecond, CapPeriod: time.Millisecond}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	runs, err := c.Run(context.Background(), filepath.Join(t.TempDir(), "out"))
	if err != nil || len(runs) != 1 || !runs[0].OK() {
		t.Fatalf("%v: %+v", err, runs)
	}
	infos := readStandinInfos(t, info)
	if len(infos) != 1 {
		t.Fatalf("%d stand-in runs", len(infos))
	}
	// What the launcher sets OpenMP's waits to is its own business (it
	// measures the CPUs); the suite's own GOMP_SPINCOUNT never reaches it.
	env := infos[0].Env
	if !strings.Contains(env["LD_PRELOAD"], "/lib/libhybridsync.so") || env["GOMP_SPINCOUNT"] == "77" || env["HYBRIDSYNC_STATS"] == "" {
		t.Errorf("through the launcher: %v; want the library preloaded, not the suite's GOMP_SPINCOUNT, a stats file", env)
	}
}

// TestLimitOnNCPUs: a program run alone and beside busy loops on one CPU
// and on 2 has a reference and a limit for each: the settings on 2 CPUs
// compare with nonex2, and their limit's C is the CPU per step over the
// 2 CPUs; the table says so, and prints "-" where cuda-blocking did not
// run alone on as many CPUs.
func TestLimitOnNCPUs(t *testing.T) {
	var runs []Run
	add := func(c, a string, wall, cpu float64) {
		for rep := range 3 {
			runs = append(runs, Run{Program: "p", Contention: c, Arm: a, Rep: rep, WallS: wall, CPUS: cpu, Steps: 1000})
		}
	}
	add("none", "cuda-default", 2, 2)
	add("none", "cuda-blocking", 2.2, 1.5)
	add("while1", "cuda-default", 4, 1)
	add("while1", "cuda-blocking", 3.3, 1)
	add("nonex2", "cuda-default", 1, 2)
	add("nonex2", "cuda-blocking", 1.1, 1.8)
	add("while1x2", "cuda-default", 2.7, 1.5)
	add("while1x2", "cuda-blocking", 1.8, 1.5)
	add("nonex4", "cuda-default", 0.8, 2)
	add("while1x4", "cuda-default", 1.6, 2)
	_, settings, arms := apptable.Present(runs)
	if want := []string{"none", "while1", "nonex2", "while1x2", "nonex4", "while1x4"}; !slices.Equal(settings, want) {
		t.Fatalf("settings %v, want %v", settings, want)
	}
	rows := apptable.Summarize(runs, []string{"p"}, settings, arms)
	if len(rows) != 6 {
		t.Fatalf("%d rows", len(rows))
	}
	one, two, four := rows[1], rows[3], rows[5]
	// One CPU: T 2 ms, 2C 3 ms per step: 2C applies.
	if l := one.Limit; l == nil || l.Bound != "2C" || l.TUS != 2000 || math.Abs(l.TwoCUS-3000) > 1e-9 || l.CPUs != 0 || !near(one.Arms[1].VsLimit, 3.3/3) {
		t.Errorf("limit on one CPU: %+v", l)
	}
	// 2 CPUs: T 1 ms against nonex2; C 1.8 ms of CPU per step over 2 CPUs, 2C 1.8 ms.
	if l := two.Limit; l == nil || l.Bound != "2C" || l.TUS != 1000 || math.Abs(l.TwoCUS-1800) > 1e-9 || l.CPUs != 2 || !near(two.Arms[1].VsLimit, 1) {
		t.Errorf("limit on 2 CPUs: %+v", l)
	}
	if !near(two.Arms[0].Ratio, 2.7) || !near(rows[2].Arms[0].Ratio, 1) || !near(one.Arms[0].Ratio, 2) {
		t.Errorf("ratios: while1x2 %v (want 2.7 against nonex2), nonex2 %v, while1 %v", *two.Arms[0].Ratio, *rows[2].Arms[0].Ratio, *one.Arms[0].Ratio)
	}
	if four.Limit != nil || !near(four.Arms[0].Ratio, 2) {
		t.Errorf("4 CPUs, no cuda-blocking alone: limit %+v, ratio %v", four.Limit, *four.Arms[0].Ratio)
	}
	var b bytes.Buffer
	if err := apptable.PrintTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if !strings.Contains(lines[4], "2C: T 1000.0 / 2C 1800.0 µs (C over 2 CPUs)") || strings.Contains(lines[2], "C over") ||
		!strings.HasSuffix(strings.Join(strings.Fields(lines[6]), " "), "- - 0") {
		t.Errorf("limit column:\n%s", b.String())
	}
}

// TestContendAtStart: a program with a ready line meets the setting from
// its ready line on; with ContendAtStart, or the pattern -start, the busy
// loops are there, pinned, before it starts, and with -late they are not
// even with ContendAtStart.
func TestContendAtStart(t *testing.T) {
	online, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	if len(online) < 2 {
		t.Skipf("this process may use %d CPU: the settings on 2 CPUs need 2 (CI has 2)", len(online))
	}
	for _, tc := range []struct {
		setting        string
		atStart, early bool
	}{{"while1x2", false, false}, {"while1x2", true, true}, {"while1x2-start", false, true}, {"while1x2-late", true, false}} {
		atStart := tc.atStart
		info := t.TempDir()
		var log bytes.Buffer
		c := Config{Programs: []Program{{Name: "omp", Command: standinCommand(t, "--info", info, "--ready", "standin-ready"), Ready: "standin-ready"}},
			Dir: ".", Arms: []string{"hybridsync-run"}, Contention: []string{tc.setting}, Reps: 1, CPU: -1, Lib: fakeLauncher(t, t.TempDir()),
			Timeout: time.Minute, CapQuota: time.Millisecond, CapPeriod: time.Millisecond, ContendAtStart: atStart, Log: &log}
		if err := c.Check(); err != nil {
			t.Fatal(err)
		}
		runs, err := c.Run(context.Background(), filepath.Join(t.TempDir(), "out"))
		if err != nil || len(runs) != 1 || !runs[0].OK() {
			t.Fatalf("%s, at start %v: %v: %+v\n%s", tc.setting, atStart, err, runs, log.String())
		}
		infos := readStandinInfos(t, info)
		if len(infos) != 1 {
			t.Fatalf("%d stand-in runs", len(infos))
		}
		pinned := 0
		for _, th := range infos[0].Busy {
			if len(th.CPUs) == 1 {
				pinned++
			}
		}
		if tc.early && pinned != 2 || !tc.early && pinned != 0 {
			t.Errorf("%s, at start %v: %d busy loops pinned at the program's start:\n%s", tc.setting, atStart, pinned, log.String())
		}
	}
}

// TestComeAndGo: a coming-and-going pattern stops the busy loops (the
// kernel shows their process stopped) and lets them run again, over and
// over, until the program exits.
func TestComeAndGo(t *testing.T) {
	online, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	s, err := corunner.SetupOn("while1", online[len(online)-1:], "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exited := make(chan struct{})
	done := make(chan struct{})
	go func() { comeAndGo(s, 50*time.Millisecond, exited); close(done) }()
	stat := fmt.Sprintf("/proc/%d/stat", s.CoRunnerPID())
	var seen []byte // the states seen, each change once
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && len(seen) < 4; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		st := b[bytes.LastIndexByte(b, ')')+2]
		if st != 'T' {
			st = 'R' // running or runnable: not stopped
		}
		if len(seen) == 0 || seen[len(seen)-1] != st {
			seen = append(seen, st)
		}
	}
	close(exited)
	<-done
	if !bytes.Contains(seen, []byte("RTR")) && !bytes.Contains(seen, []byte("TRT")) {
		t.Errorf("busy loops' states %q: want stopped and running again in turn", seen)
	}
}
