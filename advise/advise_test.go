package advise

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite/suitetest"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/decide"
)

// standinCUDA builds libhybridsync's stand-in CUDA driver, a real
// libcuda.so.1 for a program to load.
func standinCUDA(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed: it builds the stand-in CUDA driver")
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	out, err := exec.Command("gcc", "-O2", "-shared", "-fPIC", "-o", lib, "../libhybridsync/testdata/standin/cuda.c", "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// adviseParts are stand-ins for the parts: an empty library and shim
// (the loader skips them with a warning) and fakeLauncher's launcher.
func adviseParts(t *testing.T) suite.Parts {
	t.Helper()
	dir := t.TempDir()
	lib := suitetest.Launcher(t, dir, suite.LauncherName)
	return suite.Parts{Lib: lib, Blocksync: lib, Launcher: suite.LauncherFor(lib)}
}

// Advise runs a program every way under both settings, interleaved,
// and, as its result line is the same in every run and so every ratio is
// 1, decides at the minimum that no way is better: one line on stdout,
// the runs, the results document report reads and the advice in the
// output directory, nothing else beside it; an OpenMP wait setting in
// the environment is noted.
func TestAdviseSameEveryWay(t *testing.T) {
	// The launcher's way starts without it: the log says so.
	t.Setenv("OMP_WAIT_POLICY", "ACTIVE")
	// A program that loads CUDA's driver (the stand-in), so that every
	// way applies; it sleeps so that the first run sees it.
	t.Setenv("LD_PRELOAD", standinCUDA(t))
	words := []string{"sh", "-c", `sleep 0.05; echo '{"program":"same","steps":10,"wall_s":0.5,"cpu_s":0.25}'`}
	parent := t.TempDir()
	out := filepath.Join(parent, "advice")
	// What an advise killed with SIGKILL left: removed by the next one.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	suitetest.File(t, filepath.Join(parent, fmt.Sprintf("%s%d-123", workPrefix, gone.ProcessState.Pid()), "runs.jsonl"), 0o644)
	var stdout, stderr bytes.Buffer
	a := &Config{Command: words, CPUs: 1, CPU: -1, Parts: adviseParts(t), MinReps: 3, MaxReps: 6, MaxTime: time.Minute,
		Out: out, Stdout: &stdout, Stderr: &stderr}
	adv, err := Run(context.Background(), a)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
	if !strings.Contains(stderr.String(), "advise: OMP_WAIT_POLICY=ACTIVE set here: every arm but") {
		t.Error("no note of the OpenMP setting the launcher's way goes without")
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "No way is measurably better here than as it is (noise ±1.0% alone, ±1.0% beside a busy loop on its CPU; 4 repetitions)") {
		t.Errorf("stdout: %q, want one line: no way better, after the 4 repetitions the sign test needs", stdout.String())
	}
	if adv.Arm != "" || !adv.Decided || len(adv.Ways) != 3 {
		t.Errorf("advice %+v", adv)
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
		if !r.OK() {
			t.Errorf("run failed: %+v", r)
		}
		count[r.Contention+" "+r.Arm]++
	}
	for _, s := range []string{"none", "while1"} {
		for _, arm := range allArms {
			if count[s+" "+arm] != 4 {
				t.Errorf("%s %s: %d runs, want 4 (%v)", s, arm, count[s+" "+arm], count)
			}
		}
	}
	doc, err := results.Read(filepath.Join(out, results.Name))
	if err != nil || len(doc.Cells) != 10 {
		t.Errorf("results.json: %v, %d cells", err, len(doc.Cells))
	}
	if doc.Config.Reps != 4 || doc.Apps.Reps != 4 {
		t.Errorf("results.json: %d repetitions (table %d), want the 4 that ran", doc.Config.Reps, doc.Apps.Reps)
	}
	var saved decide.Advice
	if b, err := os.ReadFile(filepath.Join(out, "advice.json")); err != nil || json.Unmarshal(b, &saved) != nil || !saved.Decided {
		t.Errorf("advice.json: %v %+v", err, saved)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 1 {
		t.Errorf("beside the output: %v, want it alone", ents)
	}
}

// Bad input is one line of BadInput before anything is written; a
// command that fails as it is stops it at the first run and leaves no
// files.
func TestAdviseBadInput(t *testing.T) {
	parts := adviseParts(t)
	parent := t.TempDir()
	full := suitetest.File(t, filepath.Join(parent, "full", "x"), 0o644)
	for _, tc := range []struct {
		name    string
		command []string
		out     string
		max     int
		want    string
		cpus    int
	}{
		{"no command", nil, "", 3, "no command", 1},
		{"not found", []string{"no-such-program-here"}, "", 3, "not found in PATH", 1},
		{"fails as it is", []string{"sh", "-c", "echo broken >&2; exit 3"}, "", 3, "failed as it is (exit status 3: broken)", 1},
		{"no reps", []string{"true"}, "", 0, "--max-reps", 1},
		{"more CPUs than there are", []string{"true"}, "", 3, "--cpus 4096: this process may use", 4096},
		{"out not empty", []string{"true"}, filepath.Dir(full), 3, "not empty", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.out
			if out == "" {
				out = filepath.Join(parent, "out")
			}
			var stdout, stderr bytes.Buffer
			_, err := Run(context.Background(), &Config{Command: tc.command, CPUs: tc.cpus, CPU: -1, Parts: parts, MinReps: 1,
				MaxReps: tc.max, MaxTime: time.Minute, Out: out, Stdout: &stdout, Stderr: &stderr})
			if err == nil || !errors.As(err, new(BadInput)) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line of bad input with %q", err, tc.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
			ents, _ := os.ReadDir(parent)
			if names := names(ents); !slices.Equal(names, []string{"full"}) {
				t.Errorf("left in %s: %v", parent, names)
			}
		})
	}
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
