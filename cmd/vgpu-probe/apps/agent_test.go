package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// agentInfo is what the stand-in saw of the agent: its page
// (HYBRIDSYNC_HINTS), the mitigation its slot there carries, and its own
// slice in the kernel.
type agentInfo struct {
	Hints        string `json:"hints"`
	PageMitigNs  int64  `json:"page_mitigation_ns"`
	KernelSlice  int64  `json:"kernel_slice_ns"`
	OtherThreads int64  `json:"thread_slice_ns"` // a thread it started
}

// writeAgentInfo records, in dir/agent-<pid>.agent (not .json: those are
// writeInfo's), the stand-in's view of the agent; it waits up to 2 s for its slot in the page to carry a
// mitigation (the agent watches the process once it has started).
func writeAgentInfo(dir string) {
	if dir == "" {
		return
	}
	a := agentInfo{Hints: os.Getenv(signal.EnvHints)}
	tid := unix.Gettid()
	if a.Hints != "" {
		h := signal.NewHintSource(a.Hints, nil, nil)
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if d, ok := h.Mitigation(tid); ok {
				a.PageMitigNs = int64(d)
				break
			}
		}
	}
	if at, err := unix.SchedGetAttr(tid, 0); err == nil {
		a.KernelSlice = int64(at.Runtime)
	}
	done := make(chan int64)
	go func() {
		// A new OS thread: what CUDA's helper threads would inherit.
		runtimeLockedThread(done)
	}()
	a.OtherThreads = <-done
	b, _ := json.Marshal(a)
	os.WriteFile(filepath.Join(dir, "agent-"+strconv.Itoa(os.Getpid())+".agent"), b, 0o644)
}

// TestWithAgent runs the stand-in under apps --with-agent --hints
// --mitigate slice=100us as root, as a program and as a shell's child:
// every arm's process reads a page of its own whose slot carries the
// 100 µs slice, has that slice in the kernel (and so do the threads it
// starts); runs.jsonl and the summary name the setting; the co-runner
// keeps its slice.
func TestWithAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--with-agent needs root (loads the agent's eBPF programs; CI runs as root)")
	}
	if _, err := mitigate.Check(mitigate.System, uint64(100*time.Microsecond)); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	blocksync, lib := shims(t)
	info, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	// "wrapped" runs the stand-in as a shell's child, as gromacs.py runs
	// mdrun: the agent must watch what the program starts too.
	burn := strings.SplitN(standin(t, "burn", "--info", info, "--work", "1000000"), "=", 2)[1]
	stdout, stderr, err := execute(context.Background(), "--program", "burn="+burn, "--program", "wrapped=sh -c '"+burn+"; exit $?'",
		"--lib", lib, "--blocksync", blocksync, "--contention", "while1", "--reps", "1", "--out", out, "--json",
		"--with-agent", "--hints", "--mitigate", "slice=100us")
	if err != nil && strings.Contains(err.Error(), "BPF") {
		t.Skipf("cannot load the eBPF programs here: %v", err)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	checkNothingLeft(t)
	files, _ := filepath.Glob(filepath.Join(info, "agent-*.agent"))
	if len(files) != 2*len(suite.Arms) {
		t.Fatalf("%d runs recorded what they saw of the agent, want %d", len(files), 2*len(suite.Arms))
	}
	pages := map[string]bool{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var a agentInfo
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatal(err)
		}
		pages[a.Hints] = true
		if a.Hints == "" || a.PageMitigNs != 100_000 || a.KernelSlice != 100_000 || a.OtherThreads != 100_000 {
			t.Errorf("%s: %+v; want a page whose slot carries 100000 ns, and that slice in the kernel for the program and its threads", filepath.Base(f), a)
		}
		if _, err := os.Stat(a.Hints); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("page %s left behind", a.Hints)
		}
	}
	sum := decodeApps(t, stdout)
	const want = "hints mitigate=slice=100µs"
	if sum.Agent != want {
		t.Errorf("summary agent %q, want %q", sum.Agent, want)
	}
	for _, r := range mustReadRuns(t, filepath.Join(out, suite.RunsName)) {
		if r.Agent != want {
			t.Errorf("runs.jsonl: %s %s agent %q, want %q", r.Program, r.Arm, r.Agent, want)
		}
	}
}

// TestWithAgentFlags: --hints and --mitigate need --with-agent, which
// needs one of them, root and a valid slice; --mitigate-arms needs
// --mitigate, known arms and programs that compare the arms in one
// process: each a one-line usage error before anything runs; --from
// refuses runs of different settings.
func TestWithAgentFlags(t *testing.T) {
	cases := map[string][]string{
		"hints alone":      {"--hints"},
		"mitigate alone":   {"--mitigate", "slice=100us"},
		"agent, no action": {"--with-agent"},
		"bad slice":        {"--with-agent", "--mitigate", "slice=5s"},
		"arms alone":       {"--mitigate-arms", "hybridsync"},
	}
	if os.Geteuid() != 0 {
		cases["not root"] = []string{"--with-agent", "--hints"}
	} else {
		// The agent's own checks pass as root; what the suite checks of
		// --mitigate-arms remains.
		cases["arms without mitigate"] = []string{"--with-agent", "--hints", "--mitigate-arms", "hybridsync"}
		cases["unknown arm"] = []string{"--with-agent", "--mitigate", "slice=100us", "--mitigate-arms", "hybridsync,bogus"}
		cases["no arm"] = []string{"--with-agent", "--mitigate", "slice=100us", "--mitigate-arms", ""}
		cases["separate processes"] = []string{"--with-agent", "--mitigate", "slice=100us", "--mitigate-arms", "cuda-default"}
	}
	for name, args := range cases {
		cmd := NewCmd(func(context.Context, *Options) error { t.Errorf("%s: ran", name); return nil })
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(append([]string{"--program", "p=/bin/true", "--arms", "cuda-default"}, args...))
		err := cmd.Execute()
		if !errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line usage error", name, err)
		}
	}

	dir := t.TempDir()
	var paths []string
	for i, agent := range []string{"", "hints"} {
		b, _ := json.Marshal(suite.Run{Program: "p", Arm: "cuda-default", Contention: "none", WallS: 1, Agent: agent})
		p := filepath.Join(dir, fmt.Sprintf("runs%d.jsonl", i))
		os.WriteFile(p, append(b, '\n'), 0o644)
		paths = append(paths, p)
	}
	_, _, err := execute(context.Background(), "--from", strings.Join(paths, ","))
	if !errors.Is(err, usage.ErrBadInput) || !strings.Contains(err.Error(), "agent settings") {
		t.Errorf("--from over two agent settings: %v, want a usage error naming them", err)
	}
}

// runtimeLockedThread sends the slice of a fresh OS thread, which ends
// with the goroutine.
func runtimeLockedThread(out chan<- int64) {
	runtime.LockOSThread() // never unlocked: the goroutine ends with the thread
	var s int64
	if at, err := unix.SchedGetAttr(unix.Gettid(), 0); err == nil {
		s = int64(at.Runtime)
	}
	out <- s
}
