package advise

import (
	"bytes"
	"context"
	"errors"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite/suitetest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// barrierProgram builds an OpenMP program of n barriers per thread.
func barrierProgram(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed: it builds the OpenMP program")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "barrier.c")
	code := `#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 1000;
	#pragma omp parallel
	for (long i = 0; i < n; i++) {
		#pragma omp barrier
	}
	return 0;
}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "barrier")
	if out, err := exec.Command("gcc", "-O2", "-fopenmp", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// The first run sees what a program loads and how many threads it keeps
// busy: sleep nothing and one, an OpenMP program of two threads libgomp
// and up to two (a loaded machine may leave one of them short of a
// tenth of a CPU), a program over the stand-in CUDA driver CUDA.
func TestProbe(t *testing.T) {
	u := probe(context.Background(), []string{"sleep", "0.2"})
	if u.Err != nil || u.CUDA || u.OpenMP != "" || u.Threads != 1 || u.Wall < 200*time.Millisecond {
		t.Errorf("sleep: %+v", u)
	}
	t.Setenv("OMP_NUM_THREADS", "2")
	u = probe(context.Background(), []string{barrierProgram(t), "200000"})
	if u.Err != nil || u.CUDA || u.OpenMP != "libgomp" || u.Threads < 1 || u.Threads > 2 {
		t.Errorf("OpenMP program: %+v", u)
	}
	t.Logf("OpenMP program of 2 threads: %d busy, %v", u.Threads, u.Wall)
	t.Setenv("LD_PRELOAD", standinCUDA(t))
	if u = probe(context.Background(), []string{"sleep", "0.1"}); !u.CUDA || u.Words() != "CUDA" {
		t.Errorf("with CUDA's driver: %+v", u)
	}
	if u = probe(context.Background(), []string{"sh", "-c", "echo gone wrong >&2; exit 4"}); u.Err == nil || !strings.HasSuffix(u.Err.Error(), "exit status 4: gone wrong") {
		t.Errorf("failing: %v", u.Err)
	}
}

// A program that loads neither CUDA nor an OpenMP runtime: no way
// applies, said in one line after the first run, and nothing is written;
// a killed advise's work directory beside --out is removed.
func TestAdviseNoWayApplies(t *testing.T) {
	parent := t.TempDir()
	// What an advise killed with SIGKILL left: removed by this one.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	suitetest.File(t, filepath.Join(parent, workPrefix+strconv.Itoa(gone.ProcessState.Pid())+"-123", "runs.jsonl"), 0o644)
	var stdout, stderr bytes.Buffer
	adv, err := Run(context.Background(), &Config{Command: []string{"sleep", "0.2"}, CPU: -1, Parts: adviseParts(t),
		MinReps: 3, MaxReps: 6, MaxTime: time.Minute, Out: filepath.Join(parent, "out"), Stdout: &stdout, Stderr: &stderr})
	if err != nil || adv == nil || !adv.Decided || adv.Arm != "" {
		t.Fatalf("advice %+v, %v\n%s", adv, err, stderr.String())
	}
	if want := "No way applies: sleep loaded no CUDA and no OpenMP runtime in a first run as it is; the ways change CUDA's and OpenMP's waits only\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	if ents, _ := os.ReadDir(parent); len(ents) > 0 {
		t.Errorf("written: %v", names(ents))
	}
}

// An OpenMP program: the CUDA ways are left out and said; without --cpus
// it runs on the CPUs its threads kept busy; the runs carry the ways
// that apply only.
func TestAdviseOpenMPWays(t *testing.T) {
	bin := barrierProgram(t)
	t.Setenv("OMP_NUM_THREADS", "2")
	out := filepath.Join(t.TempDir(), "out")
	var stdout, stderr bytes.Buffer
	a := &Config{Command: []string{bin, "2000"}, CPU: -1, Parts: adviseParts(t),
		MinReps: 1, MaxReps: 1, MaxTime: time.Minute, Out: out, Stdout: &stdout, Stderr: &stderr}
	if _, err := Run(context.Background(), a); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
	if !strings.Contains(stderr.String(), "left out, as barrier loaded OpenMP (libgomp): cuda-blocking (no CUDA), hybridsync (no CUDA)") {
		t.Error("the CUDA ways' leaving is not said")
	}
	online, _ := corunner.Online()
	if a.CPUs < 1 || a.CPUs > min(2, len(online)) || !strings.Contains(stderr.String(), "advise: --cpus "+strconv.Itoa(a.CPUs)) {
		t.Errorf("--cpus %d, not said or not the threads", a.CPUs)
	}
	runs, err := apptable.ReadRuns([]string{filepath.Join(out, suite.RunsName)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Arm == "cuda-blocking" || r.Arm == "hybridsync" {
			t.Errorf("a CUDA way ran: %+v", r)
		}
	}
	if len(runs) != 6 {
		t.Errorf("%d runs, want 3 arms x 2 settings", len(runs))
	}
}

// signalAfter is a writer that calls f once when what it was given
// holds line.
type signalAfter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	line string
	once sync.Once
	f    func()
}

func (s *signalAfter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if strings.Contains(s.buf.String(), s.line) {
		s.once.Do(s.f)
	}
	return len(p), nil
}

// Interrupted after its first repetition, advise keeps the runs of the
// repetitions that ended, writes them, prints the advice they support
// and returns the interruption.
func TestAdviseInterrupted(t *testing.T) {
	t.Setenv("LD_PRELOAD", standinCUDA(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := filepath.Join(t.TempDir(), "out")
	var stdout bytes.Buffer
	stderr := &signalAfter{line: "advise: 1 of at most", f: cancel}
	_, err := Run(ctx, &Config{Command: []string{"sleep", "0.1"}, CPUs: 1, CPU: -1, Parts: adviseParts(t),
		MinReps: 50, MaxReps: 50, MaxTime: time.Hour, Out: out, Stdout: &stdout, Stderr: stderr})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want the interruption\n%s", err, stderr.buf.String())
	}
	if !strings.Contains(stderr.buf.String(), "advise: interrupted: the advice stands on the repetitions that ended, 1\n") {
		t.Errorf("stderr:\n%s", stderr.buf.String())
	}
	if !strings.HasPrefix(stdout.String(), "No way is measurably better") || !strings.Contains(stdout.String(), "; 1 repetition;") {
		t.Errorf("stdout %q", stdout.String())
	}
	runs, err := apptable.ReadRuns([]string{filepath.Join(out, suite.RunsName)})
	if err != nil || len(runs) != 10 {
		t.Errorf("runs kept: %d, %v; want one repetition's 10", len(runs), err)
	}
}

// --patterns are settings beside the loops: start as the plain setting,
// the others by their suffix; late, which needs a ready line, is refused.
func TestAdvisePatterns(t *testing.T) {
	a := &Config{Command: []string{"true"}, CPUs: 2, Patterns: []string{"start", "1s", "10s"}, MinReps: 1, MaxReps: 1, MaxTime: time.Second}
	if got := a.settings(); strings.Join(got, " ") != "nonex2 while1x2 while1x2-1s while1x2-10s" {
		t.Errorf("settings %q", got)
	}
	for _, s := range a.settings() {
		if err := suite.CheckSettings([]string{s}); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	a.CPUs, a.Patterns = 1, nil
	if got := a.settings(); strings.Join(got, " ") != "none while1" {
		t.Errorf("settings %q", got)
	}
	a.Patterns = []string{"late"}
	if err := a.validate(); err == nil || !strings.Contains(err.Error(), "--patterns late: want some of start, 1s, 10s") {
		t.Errorf("late: %v", err)
	}
}

// --max-time bounds the whole advise, a repetition under way included: a
// program that takes longer than the bound leaves the first repetition
// unfinished, stopped after a run or two of the ten it holds, and
// advise says so in one error, writing nothing.
func TestAdviseMaxTime(t *testing.T) {
	t.Setenv("LD_PRELOAD", standinCUDA(t))
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	_, err := Run(context.Background(), &Config{Command: []string{"sh", "-c", `echo x >>"$0"; sleep 1`, started}, CPUs: 1, CPU: -1,
		Parts: adviseParts(t), MinReps: 4, MaxReps: 30, MaxTime: 2500 * time.Millisecond, Out: out, Stdout: &stdout, Stderr: &stderr})
	if err == nil || !strings.Contains(err.Error(), "--max-time 2.5s ended the first repetition: nothing written") {
		t.Fatalf("error %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "advise: stopped by --max-time 2.5s in repetition 1") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	b, _ := os.ReadFile(started)
	if n := strings.Count(string(b), "x"); n < 2 || n > 6 {
		t.Errorf("the program started %d times: want the first run and part of one repetition of 10", n)
	}
	if _, err := os.Stat(out); err == nil || stdout.Len() > 0 {
		t.Errorf("written: %s, stdout %q", out, stdout.String())
	}
}
