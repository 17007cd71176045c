package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	out, err := exec.Command("gcc", "-O2", "-shared", "-fPIC", "-o", lib, "../../../libhybridsync/testdata/standin/cuda.c", "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// touch makes a file (and its folders) with mode.
func touch(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// The parts are found where make puts them beside the binary, and where
// make install puts them under the prefix (a multiarch LIBDIR too),
// through a link to the binary; what is missing says how to build it, and
// the launcher is only noted.
func TestFindParts(t *testing.T) {
	tree := t.TempDir()
	exe := touch(t, filepath.Join(tree, "vgpu-probe"), 0o755)
	if _, _, err := FindParts(Parts{}, exe); err == nil || !strings.Contains(err.Error(), "run make in the source tree") ||
		!strings.Contains(err.Error(), filepath.Join(tree, "build", "lib", "libhybridsync.so")) || !strings.Contains(err.Error(), "--lib") {
		t.Errorf("no library: %v", err)
	}
	lib := touch(t, filepath.Join(tree, "build", "lib", "libhybridsync.so"), 0o755)
	if _, _, err := FindParts(Parts{}, exe); err == nil || !strings.Contains(err.Error(), "blocksync.c") || !strings.Contains(err.Error(), "--blocksync") {
		t.Errorf("no shim: %v", err)
	}
	shim := touch(t, filepath.Join(tree, "build", BlocksyncPath), 0o755)
	p, notes, err := FindParts(Parts{}, exe)
	if err != nil || p.Lib != lib || p.Blocksync != shim || p.Launcher != "" || len(notes) != 1 || !strings.Contains(notes[0], "hybridsync-run is left out") {
		t.Errorf("no launcher: %+v %q %v", p, notes, err)
	}
	run := touch(t, filepath.Join(tree, "build", "bin", LauncherName), 0o755)
	if p, notes, err = FindParts(Parts{}, exe); err != nil || p.Launcher != run || len(notes) != 0 {
		t.Errorf("build tree: %+v %q %v", p, notes, err)
	}

	prefix := t.TempDir()
	installed := touch(t, filepath.Join(prefix, "bin", "vgpu-probe"), 0o755)
	lib = touch(t, filepath.Join(prefix, "lib", "x86_64-linux-gnu", "libhybridsync.so"), 0o755)
	shim = touch(t, filepath.Join(prefix, "lib", "x86_64-linux-gnu", "vgpu-probe", "blocksync.so"), 0o755)
	run = touch(t, filepath.Join(prefix, "bin", LauncherName), 0o755)
	link := filepath.Join(t.TempDir(), "vgpu-probe")
	if err := os.Symlink(installed, link); err != nil {
		t.Fatal(err)
	}
	if p, _, err = FindParts(Parts{}, link); err != nil || p.Lib != lib || p.Blocksync != shim || p.Launcher != run {
		t.Errorf("installed, through a link: %+v %v", p, err)
	}

	given := Parts{Lib: filepath.Join(prefix, "nope.so")}
	if _, _, err := FindParts(given, installed); err == nil || !strings.Contains(err.Error(), "--lib "+given.Lib+": not a file") {
		t.Errorf("--lib missing: %v", err)
	}
	given = Parts{Launcher: touch(t, filepath.Join(prefix, "noexec"), 0o644)}
	if _, _, err := FindParts(given, installed); err == nil || !strings.Contains(err.Error(), "--launcher") {
		t.Errorf("--launcher not executable: %v", err)
	}
}

// adviseParts are stand-ins for the parts: an empty library and shim
// (the loader skips them with a warning) and fakeLauncher's launcher.
func adviseParts(t *testing.T) Parts {
	t.Helper()
	dir := t.TempDir()
	lib := fakeLauncher(t, dir)
	return Parts{Lib: lib, Blocksync: lib, Launcher: LauncherFor(lib)}
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
	touch(t, filepath.Join(parent, fmt.Sprintf("%s%d-123", workPrefix, gone.ProcessState.Pid()), "runs.jsonl"), 0o644)
	var stdout, stderr bytes.Buffer
	a := &AdviseConfig{Command: words, CPUs: 1, CPU: -1, Parts: adviseParts(t), MinReps: 3, MaxReps: 6, MaxTime: time.Minute,
		Out: out, Stdout: &stdout, Stderr: &stderr}
	adv, err := Advise(context.Background(), a)
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
	b, err := os.ReadFile(filepath.Join(out, RunsName))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := apptable.ParseRuns(RunsName, b)
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
		for _, arm := range adviseArms {
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
	full := touch(t, filepath.Join(parent, "full", "x"), 0o644)
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
			_, err := Advise(context.Background(), &AdviseConfig{Command: tc.command, CPUs: tc.cpus, CPU: -1, Parts: parts, MinReps: 1,
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

func TestProgramWords(t *testing.T) {
	argv := []string{"/opt/my app/run", "it's", "a b", "--x=1"}
	back, err := SplitWords(quoteWords(argv))
	if err != nil || !slices.Equal(back, argv) {
		t.Errorf("quoteWords: %q back as %q, %v", quoteWords(argv), back, err)
	}
	if got := shellWords(argv); got != `'/opt/my app/run' 'it'\''s' 'a b' --x=1` {
		t.Errorf("shellWords: %s", got)
	}
	for in, want := range map[string]string{"sleep": "sleep", "./my app": "my_app", "/x/_hidden": "p_hidden", "python3.12": "python3.12"} {
		if got := programName(in); got != want || !nameRE.MatchString(got) {
			t.Errorf("programName(%q) = %q, want %q", in, got, want)
		}
	}
}
