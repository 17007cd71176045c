package advise

import (
	"bytes"
	"context"
	"errors"
	adv "github.com/vgpu-probe/vgpu-probe/advise"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

func TestMain(m *testing.M) {
	reexec.Init()
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// execute runs the command with args, as main would, in this process.
func execute(args ...string) (stdout, stderr string, err error) {
	cmd := NewCmd(nil)
	var o, e bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&o)
	cmd.SetErr(&e)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.Execute()
	return o.String(), e.String(), err
}

// Bad input is a one-line error, bad input where main exits 2, with
// nothing on stdout and nothing written.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.so")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	parts := []string{"--lib", empty, "--blocksync", empty, "--out", out}
	for _, tc := range []struct {
		args  []string
		want  string
		usage bool
	}{
		{nil, "no command", true},
		{[]string{"--"}, "no command", true},
		{[]string{"--max-rep", "3", "--", "true"}, "unknown flag: --max-rep", false},
		{[]string{"--lib", filepath.Join(dir, "nope.so"), "--", "true"}, "--lib " + filepath.Join(dir, "nope.so") + ": not a file", true},
		{append(parts, "--", "false"), "false failed as it is (exit status 1)", true},
		{append(parts, "--min-reps", "50", "--max-reps", "5", "--", "true"), "--min-reps 50 is more than --max-reps 5", true},
		{append(parts, "--max-time", "-1", "--"), `invalid argument "-1" for "--max-time" flag: want a positive duration with a unit, as 10m or 90s`, false},
		{append(parts, "--max-time", "5", "--"), `invalid argument "5" for "--max-time" flag: want a positive duration with a unit, as 10m or 90s`, false},
		{[]string{"--lib", empty, "--blocksync", empty, "--out", "/proc/x", "--", "true"}, "--out /proc/x: cannot write in /proc:", true},
		{append(parts, "--cpus", "-1", "--", "true"), "--cpus must be positive", true},
		{append(parts, "--", "no-such-program-here", "x"), "not found in PATH", true},
		{append(parts, "--max-time", "0", "--", "true"), `invalid argument "0" for "--max-time" flag: want a positive duration`, false},
	} {
		stdout, _, err := execute(tc.args...)
		switch {
		case err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n"):
			t.Errorf("%q: error %v, want one line with %q", tc.args, err, tc.want)
		case tc.usage && !errors.Is(err, usage.ErrBadInput):
			t.Errorf("%q: %v is not bad input (exit status 1, not 2)", tc.args, err)
		case stdout != "":
			t.Errorf("%q: stdout %q", tc.args, stdout)
		case strings.Contains(err.Error(), ".vgpu-probe-advise-"):
			t.Errorf("%q: %v names a path it was not given", tc.args, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in %s: %v", dir, ents)
	}
}

// Flags after the command are the command's own.
func TestCommandFlags(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "x.so")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got *adv.Config
	cmd := NewCmd(func(_ context.Context, o *adv.Config) error { got = o; return nil })
	cmd.SetArgs([]string{"--lib", empty, "--blocksync", empty, "--max-reps", "4", "./app", "--size", "4096", "--max-reps", "9"})
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got == nil || !slices.Equal(got.Command, []string{"./app", "--size", "4096", "--max-reps", "9"}) || got.MaxReps != 4 || got.Lib != empty {
		t.Errorf("parsed %+v", got)
	}
}

var built struct {
	once      sync.Once
	dir, root string
	err       error
}

// build runs make into a fresh directory, as a user's first `make` does
// in the source tree: the binary, and beside it build/ with the parts.
func build(t *testing.T) (bin string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed (.ci/run installs it)")
	}
	built.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			built.err = err
			return
		}
		built.root = filepath.Dir(strings.TrimSpace(string(out)))
		if built.dir, built.err = os.MkdirTemp("", "advise-make-"); built.err != nil {
			return
		}
		mk := exec.Command("make", "-s", "BIN="+filepath.Join(built.dir, "vgpu-probe"), "BUILD="+filepath.Join(built.dir, "build"))
		mk.Dir = built.root
		if out, err := mk.CombinedOutput(); err != nil {
			built.err = errors.New("make: " + err.Error() + "\n" + string(out))
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return filepath.Join(built.dir, "vgpu-probe")
}

// advise runs the binary's advise on argv with env added, and checks what
// every run must give: exit 0, one line on stdout that is a
// recommendation, every way run in each default setting (alone, beside
// the loop from the start, and with it on and off by the second), the results
// document report reads, the advice; it returns the line and the runs.
func advise(t *testing.T, bin string, env []string, cpu string, argv ...string) (string, []suite.Run) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "advice")
	cmd := exec.Command(bin, append([]string{"advise", "--cpus", "1", "--cpu", cpu, "--max-reps", "3", "--min-reps", "3", "--out", out, "--"}, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("advise %q: %v\n%s", argv, err, stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
	line := strings.TrimSuffix(stdout.String(), "\n")
	if strings.Contains(line, "\n") || !(strings.HasPrefix(line, "Run it ") || strings.HasPrefix(line, "No way is measurably better")) {
		t.Errorf("stdout %q: want one recommendation line", stdout.String())
	}
	if strings.Contains(stderr.String(), "left out") {
		t.Errorf("a way was left out: the build should have every part")
	}
	b, err := os.ReadFile(filepath.Join(out, suite.RunsName))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := apptable.ParseRuns(suite.RunsName, b)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range runs {
		count[r.Contention+" "+r.Arm]++
	}
	for _, s := range []string{"none", "while1", "while1-1s"} {
		for _, arm := range []string{"cuda-default", "cuda-default-again", "cuda-blocking", "hybridsync", "hybridsync-run"} {
			if count[s+" "+arm] != 3 {
				t.Errorf("%s under %s: %d runs, want 3", arm, s, count[s+" "+arm])
			}
		}
	}
	if doc, err := results.Read(filepath.Join(out, results.Name)); err != nil || len(doc.Cells) != 15 {
		t.Errorf("results.json: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "advice.json")); err != nil {
		t.Error(err)
	}
	return line, runs
}

// cpu is the i-th CPU from the last that this process may use (the
// last where there are fewer).
func cpu(t *testing.T, i int) string {
	online, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(online[max(0, len(online)-1-i)])
}

// After make, advise needs nothing else: it finds the library, the shim
// and the launcher beside the binary. On a program that loads neither
// CUDA nor OpenMP it says after the first run that no way applies, and
// writes nothing. It runs beside the next test (CI has 2 CPUs).
func TestAfterMake(t *testing.T) {
	t.Parallel()
	bin := build(t)
	out := filepath.Join(t.TempDir(), "advice")
	cmd := exec.Command(bin, "advise", "--out", out, "--", "sleep", "0.2")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if want := "No way applies: sleep loaded no CUDA and no OpenMP runtime in a first run as it is; the ways change CUDA's and OpenMP's waits only\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q\n%s", stdout.String(), want, stderr.String())
	}
	if strings.Contains(stderr.String(), "left out") {
		t.Errorf("a part was missing: the build should have every one\n%s", stderr.String())
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written", out)
	}
}

// A CUDA program on the stand-in driver and runtime (libhybridsync's
// tests'): the library engages in its ways and writes its stats where
// the runs say.
func TestCUDAStandin(t *testing.T) {
	t.Parallel()
	bin := build(t)
	dir := t.TempDir()
	td := filepath.Join(built.root, "libhybridsync", "testdata")
	for _, s := range [][]string{
		{"gcc", "-O2", "-shared", "-fPIC", "-o", "libcuda.so.1", "-Wl,-soname,libcuda.so.1", filepath.Join(td, "standin", "cuda.c"), "-lpthread"},
		{"gcc", "-O2", "-shared", "-fPIC", "-o", "libcudart.so.13", "-Wl,-soname,libcudart.so.13", filepath.Join(td, "standin", "cudart.c"), "-ldl", "-lpthread"},
		{"ln", "-sf", "libcudart.so.13", "libcudart.so"},
		{"gcc", "-O2", "-rdynamic", "-I" + filepath.Join(td, "programs"), "-o", "rtapp", filepath.Join(td, "programs", "rtapp.c"), "-L.", "-lcudart", "-lpthread", "-ldl"},
	} {
		c := exec.Command(s[0], s[1:]...)
		c.Dir = dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", s, err, out)
		}
	}
	_, runs := advise(t, bin, []string{"LD_LIBRARY_PATH=" + dir}, cpu(t, 1), filepath.Join(dir, "rtapp"), "300", "1")
	stats := 0
	for _, r := range runs {
		if r.Stats != "" {
			if _, err := os.Stat(r.Stats); err != nil {
				t.Errorf("%s %s: %v", r.Arm, r.Contention, err)
			}
			stats++
		}
	}
	if stats == 0 {
		t.Error("no run of the library wrote its stats")
	}
}

// apps finds the parts make built beside the binary as advise does: the
// arms that need the shim, the library and the launcher run without
// --blocksync, --lib or --launcher.
func TestAppsFindsTheParts(t *testing.T) {
	t.Parallel()
	bin := build(t)
	out := filepath.Join(t.TempDir(), "apps")
	cmd := exec.Command(bin, "apps", "--program", "p=sleep 0.05", "--arms", "cuda-default,cuda-blocking,hybridsync,hybridsync-run",
		"--contention", "none", "--reps", "1", "--cpu", cpu(t, 1), "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("apps without --blocksync, --lib, --launcher after make: %v\n%s", err, stderr.String())
	}
	runs, err := apptable.ReadRuns([]string{filepath.Join(out, suite.RunsName)})
	if err != nil || len(runs) != 4 {
		t.Fatalf("runs: %d, %v", len(runs), err)
	}
	for _, r := range runs {
		if !r.OK() {
			t.Errorf("%s: %s", r.Arm, r.Error)
		}
	}
}
