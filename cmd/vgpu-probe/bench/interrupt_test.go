package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/proctree"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// TestInterrupt builds vgpu-probe and runs `bench --device sim --json` as
// a user does, then sends it SIGINT or SIGTERM while a co-runner and a
// cell run: it must exit 130 or 143, print valid JSON with the cells that
// finished and "interrupted": true, and leave no process (found by a mark
// in the environment its children inherit) and no cgroup behind.
func TestInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "vgpu-probe")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// The cap+while1 setting adds a cgroup, where one can be made.
	contention := "while1"
	if _, err := cpucap.Detect(); err == nil && os.Geteuid() == 0 {
		contention = "cap+while1"
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			out := t.TempDir()
			mark := fmt.Sprintf("VGPU_PROBE_TEST_MARK=%s-%d", t.Name(), time.Now().UnixNano())
			cmd := exec.Command(bin, "bench", "--device", "sim", "--json", "--contention", contention, "--modes", "spin,block,hybrid",
				"--reps", "1", "--steps", "400", "--out", out)
			cmd.Env = append(os.Environ(), mark)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			waitForSecondCell(t, mark)
			cmd.Process.Signal(tc.sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Errorf("exit %v, want %d (stderr %q)", err, tc.code, stderr.String())
			}
			var f0 results.File
			dec := json.NewDecoder(&stdout)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f0); err != nil || f0.Bench == nil {
				t.Fatalf("stdout is not the results document with a bench part: %v\n%s", err, stdout.String())
			}
			doc := f0.Bench
			if !doc.Interrupted || len(doc.Rows) == 0 || len(doc.Rows) >= 3 || len(f0.Cells) != len(doc.Rows) {
				t.Errorf("interrupted %v with %d cells (%d in the document), want true with 1 or 2 of 3", doc.Interrupted, len(doc.Rows), len(f0.Cells))
			}
			for _, r := range doc.Rows {
				if r.WallS <= 0 || r.Steps != 400 {
					t.Errorf("finished cell %+v is not a measurement", r)
				}
			}
			// The results document keeps the finished cells, and says
			// the run was cut short.
			if f, err := results.Read(filepath.Join(out, results.Name)); err != nil {
				t.Error(err)
			} else if len(f.Cells) != len(doc.Rows) || !strings.Contains(strings.Join(f.Config.Notes, " "), "interrupted") {
				t.Errorf("results.json: %d cells (stdout %d), notes %q", len(f.Cells), len(doc.Rows), f.Config.Notes)
			}
			if !strings.Contains(stderr.String(), "interrupted after") || strings.Contains(stderr.String(), "context canceled") {
				t.Errorf("stderr %q does not say it was interrupted, or says it as Go's error", stderr.String())
			}
			if left := proctree.WithEnv(mark); len(left) > 0 {
				t.Errorf("processes %v left running", left)
			}
			name := "vgpu-probe-bench-" + strconv.Itoa(cmd.Process.Pid)
			for _, dir := range []string{cpucap.Root, filepath.Join(cpucap.Root, "cpu")} {
				if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
					t.Errorf("cgroup %s left in %s", name, dir)
				}
			}
		})
	}
}

// waitForSecondCell returns once a second cell process carrying mark has
// started: the first cell has then finished, and the co-runner and the
// second cell run.
func waitForSecondCell(t *testing.T, mark string) {
	t.Helper()
	var cells []int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, p := range proctree.WithEnv(mark) {
			if proctree.Env(p, "VGPU_PROBE_REEXEC") == "workload-cell" && !slices.Contains(cells, p) {
				cells = append(cells, p)
			}
		}
		if len(cells) >= 2 {
			return
		}
	}
	t.Fatalf("bench started %d cells in 60 s", len(cells))
}
