package run

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/scenario"
	"github.com/vgpu-probe/vgpu-probe/proctree"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// parse runs the command line through NewCmd and returns the options runF
// received (nil if it was not called) and the error.
func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	var got *Options
	cmd := NewCmd(func(_ context.Context, o *Options) error { got = o; return nil })
	root := &cobra.Command{Use: "vgpu-probe"}
	root.AddCommand(cmd)
	root.SetArgs(append([]string{"run"}, args...))
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SilenceErrors, root.SilenceUsage = true, true
	err := root.Execute()
	return got, err
}

func TestDefaults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	o, err := parse(t, "--corunner", "while1", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	cpus, _ := corunner.Online()
	if !slices.Equal(o.VCPUs, scenario.ScaledVCPUs(len(cpus))) || !slices.Equal(o.Scenarios, scenario.Names()) ||
		o.Corunner != "while1" || o.Device != "sim" || o.Reps != 3 || o.Steps != 300 || !slices.Equal(o.Corunners, []int{1}) {
		t.Errorf("defaults: %+v", o)
	}
	if len(o.matrix.Keys()) == 0 {
		t.Error("default matrix is empty")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Error("parsing created the output directory")
	}
	o, err = parse(t)
	if err != nil || !strings.HasPrefix(o.OutDir, filepath.Join("vgpu-probe-results", "run-")) {
		t.Errorf("default --out %q, %v", o.OutDir, err)
	}
}

func TestFlags(t *testing.T) {
	o, err := parse(t, "--scenario", "shared1,baseline", "--corunner-cmd", "sleep 1", "--corunners", "1,2,3,4", "--vcpus", "1",
		"--modes", "spin,cuda-auto,hybrid", "--workload-cmd", "true", "--reps", "5", "--out", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if o.matrix.Corunner != "sleep 1" || len(o.matrix.Keys()) != 3*(4+1) {
		t.Errorf("matrix %+v: %d cells", o.matrix, len(o.matrix.Keys()))
	}
	if c := o.config(); c.Workload != "true" || c.Device != "" || c.Reps != 5 {
		t.Errorf("config %+v", c)
	}
}

// TestBadInput: each is a one-line error marked as bad input (exit 2), and
// nothing runs.
func TestBadInput(t *testing.T) {
	cpus, _ := corunner.Online()
	existing := t.TempDir()
	if err := results.Write(filepath.Join(existing, "results.json"), &results.File{}); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"unknown scenario":     {"--scenario", "shared3"},
		"unknown co-runner":    {"--corunner", "while2"},
		"too many vCPUs":       {"--vcpus", strconv.Itoa(len(cpus) + 1)},
		"zero vCPUs":           {"--vcpus", "0"},
		"5 co-runner VMs":      {"--corunners", "5"},
		"unknown mode":         {"--modes", "spin,nap"},
		"unknown device":       {"--device", "tpu"},
		"missing workload cmd": {"--workload-cmd", "/no/such/program --flag"},
		"missing corunner cmd": {"--corunner-cmd", "no-such-program-vgpu-probe"},
		"blank command":        {"--workload-cmd", "   "},
		"zero reps":            {"--reps", "0"},
		"zero steps":           {"--steps", "0"},
		"bad period":           {"--cpu-period", "2s"},
		"resume without out":   {"--resume"},
		"existing results":     {"--out", existing},
		"unknown backend":      {"--backend", "xen"},
		"agent not built in":   {"--with-agent"},
		"hints on local":       {"--hints"},
		"unknown flag":         {"--vcpu", "1"},
		"argument":             {"extra"},
	} {
		o, err := parse(t, args...)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if o != nil {
			t.Errorf("%s: ran", name)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", name, err)
		}
		if name != "unknown flag" && name != "argument" && !errors.Is(err, usage.ErrBadInput) {
			// cobra's own flag and argument errors are mapped to exit 2 by
			// main (root's SetFlagErrorFunc, isCobraUsage).
			t.Errorf("%s: %v is not marked as bad input", name, err)
		}
	}
}

// TestBinary builds vgpu-probe and runs it as a user does: bad input exits
// 2 with one line and starts nothing; Ctrl-C during a run exits 130,
// prints the cells that finished, leaves no process and no cgroup behind,
// and keeps the results file.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "vgpu-probe")
	build := exec.Command("go", "build", "-o", bin, "github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "--vcpus", "999", "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("--vcpus 999: %v, stderr %q; want exit 2 and one line", err, stderr.String())
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Error("bad input created the output directory")
	}

	cmd = exec.Command(bin, "run", "--scenario", "baseline,shared1", "--vcpus", "1", "--corunners", "2", "--modes", "spin,block", "--steps", "3000", "--reps", "1", "--out", out)
	stderr.Reset()
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Interrupt once the co-runners run: two processes whose parent is
	// the run.
	deadline := time.Now().Add(60 * time.Second)
	for len(proctree.Children(pid)) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	kids := proctree.Children(pid)
	if len(kids) < 3 {
		cmd.Process.Kill()
		t.Fatalf("run never started its co-runners and runner (children %v)", kids)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("interrupted run: %v, want exit 130", err)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr %q does not say it was interrupted", stderr.String())
	}
	// The baseline group finished before the co-runners started: its row
	// is printed.
	if !strings.Contains(stdout.String(), "\nbaseline ") {
		t.Errorf("stdout %q lacks the finished baseline row", stdout.String())
	}
	time.Sleep(50 * time.Millisecond)
	for _, k := range kids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(k) + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
			t.Errorf("process %d left running after Ctrl-C", k)
		}
	}
	if _, err := results.Read(filepath.Join(out, "results.json")); err != nil {
		t.Errorf("results after Ctrl-C: %v", err)
	}
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/cpu"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "vgpu-probe-run-"+strconv.Itoa(pid)+"-") {
				t.Errorf("cgroup %s left after Ctrl-C", e.Name())
			}
		}
	}
}

// TestWithRealAgent runs the built binary with --with-agent: the agent
// (eBPF, root) watches the runner and the co-runner, and the cell gets its
// snapshot and the threads' on/off-CPU intervals.
func TestWithRealAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("the agent needs root (CI runs as root)")
	}
	bin := filepath.Join(t.TempDir(), "vgpu-probe")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "--with-agent", "--scenario", "shared1", "--vcpus", "1", "--modes", "block", "--reps", "1", "--steps", "200", "--timeline-steps", "5", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run --with-agent: %v\n%s", err, b)
	}
	f, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Cells[0]
	if c.AgentError != "" {
		t.Skipf("the agent could not run here: %s", c.AgentError)
	}
	if !strings.Contains(string(c.Agent), `"targets"`) || c.Timeline == nil {
		t.Fatalf("agent snapshot %.200s, timeline %v", c.Agent, c.Timeline)
	}
	var names []string
	has := func(prefix string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, prefix) })
	}
	for _, tr := range c.Timeline.Threads {
		names = append(names, tr.Name)
		for _, iv := range tr.Intervals {
			if iv.End <= iv.Start {
				t.Errorf("%s: empty interval %+v", tr.Name, iv)
			}
		}
	}
	if !has("runner vcpu0") || !has("corunner1 tid ") {
		t.Errorf("tracks %v: want the runner's vCPU and the co-runner's threads", names)
	}
}
