package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestExitCodes: bad input exits 2 with one line on stderr and nothing on
// stdout; --help and --version exit 0.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--version"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"bench", "--help"}, 0},
		{[]string{"no-such-command"}, 2},
		{[]string{"bench", "--no-such-flag"}, 2},
		{[]string{"bench", "--modes", "telepathy"}, 2},
		{[]string{"bench", "--contention", "earthquake"}, 2},
		{[]string{"bench", "--kernel-us", "-5"}, 2},
		{[]string{"bench", "--profile", "/nonexistent/profile"}, 2},
		{[]string{"bench", "--steps", "0"}, 2},
		{[]string{"bench", "--cpu", "4096"}, 2},
		{[]string{"bench", "--log-level", "chatty"}, 2},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errb.String())
		}
		if tc.code == 2 {
			if n := strings.Count(strings.TrimSpace(errb.String()), "\n"); n != 0 {
				t.Errorf("%v: %d lines on stderr, want one: %q", tc.args, n+1, errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("%v: wrote to stdout on bad input: %q", tc.args, out.String())
			}
		}
	}
}

func TestBadProfileFile(t *testing.T) {
	p := t.TempDir() + "/profile"
	os.WriteFile(p, []byte("nonbonded fast\n"), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--profile", p}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "line 1") {
		t.Errorf("exit %d, stderr %q; want 2 and the line that failed", code, errb.String())
	}
}

// TestExitCodeOfSignal: a command ended by SIGINT or SIGTERM exits 130 or
// 143, as shells report a process killed by them; bad input stays 2.
func TestExitCodeOfSignal(t *testing.T) {
	for _, tc := range []struct {
		err, cause error
		want       int
	}{
		{nil, nil, 0},
		{errors.New("failed"), nil, 1},
		{context.Canceled, interrupted{syscall.SIGINT}, 130},
		{fmt.Errorf("interrupted: %w", context.Canceled), interrupted{syscall.SIGTERM}, 143},
		{errors.New("failed"), context.Canceled, 1},
		{usage.Errorf("bad"), interrupted{syscall.SIGINT}, 2},
		{nil, interrupted{syscall.SIGINT}, 0},
	} {
		if got := exitCode(tc.err, tc.cause); got != tc.want {
			t.Errorf("exitCode(%v, %v) = %d, want %d", tc.err, tc.cause, got, tc.want)
		}
	}
	if !errors.Is(interrupted{syscall.SIGINT}, context.Canceled) {
		t.Error("the signal cause is not a context.Canceled")
	}
}

// TestVersion: the binary `make build` makes reports the VERSION file's
// release and the commit it was built from.
func TestVersion(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse: %v): no commit to report", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	release, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "vgpu-probe")
	if out, err := exec.Command("make", "-s", "-C", root, "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	dirty := ""
	if exec.Command("git", "diff", "--quiet", "HEAD", "--").Run() != nil {
		dirty = "-dirty"
	}
	want := fmt.Sprintf("vgpu-probe version %s (commit %s%s)\n", strings.TrimSpace(string(release)), strings.TrimSpace(string(head)), dirty)
	if string(out) != want {
		t.Errorf("--version: %q, want %q", out, want)
	}
}

// TestVersionStamped: a binary built without the Makefile names the commit
// Go stamped into it.
func TestVersionStamped(t *testing.T) {
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionString(info, true), version+" (commit 0123456789ab-dirty)"; got != want {
		t.Errorf("stamped: %q, want %q", got, want)
	}
	if got, want := versionString(nil, false), version+" (commit unknown)"; got != want {
		t.Errorf("no build info: %q, want %q", got, want)
	}
}

// TestReportComputesAppsTable: report computes apps' table, paired ratios
// and A/A column included, from runs.jsonl files (compressed or not) and
// from an apps results document, with the same numbers apps --from
// prints for the same runs taken together.
func TestReportComputesAppsTable(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "bench", "2026-11-27-h200-gromacs-current")
	a, b := filepath.Join(dir, "alone-aa.runs.jsonl"), filepath.Join(dir, "cap.runs.jsonl")
	tmp := t.TempDir()
	// b compressed, as docs/bench keeps most runs.
	raw, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	bz := filepath.Join(tmp, "cap.runs.jsonl.gz")
	if err := os.WriteFile(bz, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	exec := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	var from results.File
	if err := json.Unmarshal([]byte(exec("apps", "--from", a+","+b, "--json")), &from); err != nil || from.Apps == nil || len(from.Apps.Results) == 0 {
		t.Fatalf("apps --from --json: %v", err)
	}
	rows := func(args ...string) []apptable.Row {
		t.Helper()
		var rep struct {
			Apps []struct {
				Rows []apptable.Row `json:"rows"`
			} `json:"apps"`
		}
		if err := json.Unmarshal([]byte(exec(append([]string{"report", "--format", "json"}, args...)...)), &rep); err != nil || len(rep.Apps) != 1 {
			t.Fatalf("report %v: %v, %d tables", args, err, len(rep.Apps))
		}
		return rep.Apps[0].Rows
	}
	want, _ := json.Marshal(from.Apps.Results)
	aa := false
	for _, r := range from.Apps.Results {
		aa = aa || (r.AAPaired != nil && r.HSVsDefaultPaired != nil)
	}
	if !aa {
		t.Fatalf("no row with the paired and A/A ratios: %s", want)
	}
	doc := filepath.Join(tmp, results.Name)
	if err := results.Write(doc, &from); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{a, bz}, {doc}} {
		if got, _ := json.Marshal(rows(args...)); !bytes.Equal(got, want) {
			t.Errorf("report %v:\n%s\napps --from:\n%s", args, got, want)
		}
	}
	// The text is apps --from's table.
	table := exec("apps", "--from", a+","+b)
	if text := exec("report", a, bz); !strings.Contains(text, table) {
		t.Errorf("report's text lacks apps --from's table:\n%s\n%s", table, text)
	}
}

// A run that fails before its first cell (the CUDA device on a machine
// without CUDA) exits 1 and leaves no results file that would read as a
// result, nor the directory it made for one.
func TestFailedRunLeavesNoResults(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("a GPU driver is present: run --device cuda would succeed")
	}
	t.Setenv("HYBRIDSYNC_CUDA_LIB", "/nonexistent/libcuda.so.1")
	out := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "--device", "cuda", "--nvml=false", "--scenario", "baseline", "--vcpus", "1", "--modes", "block",
		"--reps", "1", "--steps", "10", "--out", out}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1 (stderr %q)", code, stderr.String())
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left (%v): a failed run must leave no results", out, err)
	}
}
