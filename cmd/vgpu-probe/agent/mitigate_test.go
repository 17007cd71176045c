package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

// envAgentArgs makes the test binary run the agent with these arguments
// (JSON), as main does, so that a test can send it signals.
const envAgentArgs = "VGPU_PROBE_TEST_AGENT_ARGS"

func TestMain(m *testing.M) {
	if a := os.Getenv(envAgentArgs); a != "" {
		os.Exit(agentMain(a))
	}
	os.Exit(m.Run())
}

func agentMain(argsJSON string) int {
	var args []string
	if err := json.Unmarshal([]byte(argsJSON), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := NewCmd(nil)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, bpfload.ErrPermission) {
			return 3
		}
		return 1
	}
	return 0
}

func TestMitigateFlag(t *testing.T) {
	var got *Options
	cmd := NewCmd(func(o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--pid", "1", "--mitigate", "slice=100us"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Mitigate != "slice=100us" {
		t.Fatalf("--mitigate read as %q", got.Mitigate)
	}
	for _, v := range []string{"slice=10us", "slice=1s", "slice", "100us", "slice=fast"} {
		o := Options{PIDs: []int{1}, Listen: DefaultListen, Window: time.Minute, Mitigate: v}
		err := o.Validate()
		if !errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--mitigate %s: got %v, want a one-line usage error", v, err)
		}
	}
}

type einvalSched struct{}

func (einvalSched) Get(int) (*unix.SchedAttr, error) {
	return &unix.SchedAttr{Size: unix.SizeofSchedAttr}, nil
}
func (einvalSched) Set(int, *unix.SchedAttr) error { return unix.EINVAL }

// A kernel without custom slices: one line, not a usage error, before any
// eBPF program is loaded.
func TestRunMitigateUnsupported(t *testing.T) {
	o := &Options{PIDs: []int{os.Getpid()}, Listen: DefaultListen, Window: time.Minute, Once: time.Second,
		Mitigate: "slice=100us", Sched: einvalSched{},
		Ctx: context.Background(), Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 }, Capabilities: allCaps,
		LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
			t.Fatal("probe loaded on a kernel without custom slices")
			return nil, nil
		}}
	err := Run(o)
	if !errors.Is(err, mitigate.ErrUnsupported) || errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want a one-line failure wrapping ErrUnsupported", err)
	}
	t.Log(err)
}

func sliceOf(t *testing.T, tid int) uint64 {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatalf("sched_getattr %d: %v", tid, err)
	}
	return a.Runtime
}

// The agent, a real process, sets the slice of a watched process and puts
// it back when SIGTERM stops it.
func TestMitigateRestoredOnSIGTERM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	if _, err := mitigate.Check(mitigate.System, uint64(100*time.Microsecond)); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	pid := target.Process.Pid
	before := sliceOf(t, pid)

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal([]string{"--pid", fmt.Sprint(pid), "--mitigate", "slice=100us", "--listen", "127.0.0.1:0"})
	agent := exec.Command(self)
	agent.Env = append(os.Environ(), envAgentArgs+"="+string(args))
	var stderr bytes.Buffer
	agent.Stderr = &stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	defer agent.Process.Kill()

	for deadline := time.Now().Add(30 * time.Second); sliceOf(t, pid) != uint64(100*time.Microsecond); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			if agent.ProcessState.ExitCode() == 3 {
				t.Skipf("kernel does not let root load BPF: %s", stderr.String())
			}
			t.Fatalf("agent exited (%v) before mitigating:\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not set the slice:\n%s", stderr.String())
		}
	}
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agent after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not stop on SIGTERM:\n%s", stderr.String())
	}
	if got := sliceOf(t, pid); got != before {
		t.Fatalf("slice %d after the agent stopped, want %d back\n%s", got, before, stderr.String())
	}
}
