package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// envAgentPID makes the test binary run the agent on these pids (comma
// separated) with --mitigate slice=100us, as main does, so that a test
// can send it signals; envAgentDiscover=1 runs it with --discover (and
// the pids, if any). envAgentSlice ("none": no --mitigate),
// envAgentHints, envAgentState, envAgentListen and envAgentOnce set
// --mitigate's slice, --hints, the state directory, --listen and --once.
// It exits 2 for bad input, as the command does.
const (
	envAgentPID      = "VGPU_PROBE_TEST_AGENT_PID"
	envAgentDiscover = "VGPU_PROBE_TEST_AGENT_DISCOVER"
	envAgentSlice    = "VGPU_PROBE_TEST_AGENT_SLICE"
	envAgentHints    = "VGPU_PROBE_TEST_AGENT_HINTS"
	envAgentState    = "VGPU_PROBE_TEST_AGENT_STATE"
	envAgentListen   = "VGPU_PROBE_TEST_AGENT_LISTEN"
	envAgentOnce     = "VGPU_PROBE_TEST_AGENT_ONCE"
)

func TestMain(m *testing.M) {
	if pid := os.Getenv(envAgentPID); pid != "" || os.Getenv(envAgentDiscover) == "1" {
		os.Exit(agentMain(pid))
	}
	os.Exit(m.Run())
}

func agentMain(pidArg string) int {
	var pids []int
	for _, f := range strings.FieldsFunc(pidArg, func(r rune) bool { return r == ',' }) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		pids = append(pids, pid)
	}
	slice := "100us"
	if s := os.Getenv(envAgentSlice); s != "" {
		slice = s
	}
	listen := "127.0.0.1:0"
	if l := os.Getenv(envAgentListen); l != "" {
		listen = l
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &Config{PIDs: pids, Discover: os.Getenv(envAgentDiscover) == "1", Mitigate: "slice=" + slice, Listen: listen, Window: time.Minute,
		TraceEvery: 10 * time.Second, TraceWindow: time.Second, Out: os.Stdout,
		Hints: os.Getenv(envAgentHints), StateDir: os.Getenv(envAgentState),
		Log: zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).With().Timestamp().Logger()}
	if slice == "none" {
		c.Mitigate = ""
	}
	if d := os.Getenv(envAgentOnce); d != "" {
		var err error
		if c.Once, err = time.ParseDuration(d); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if err := Run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		switch {
		case errors.Is(err, bpfload.ErrPermission):
			return 3
		case errors.Is(err, ErrRequest):
			return 2
		}
		return 1
	}
	return 0
}

type einvalSched struct{}

func (einvalSched) Get(int) (*unix.SchedAttr, error) {
	return &unix.SchedAttr{Size: unix.SizeofSchedAttr}, nil
}
func (einvalSched) Set(int, *unix.SchedAttr) error { return unix.EINVAL }

// A kernel without custom slices: one line, not a request error, before any
// eBPF program is loaded.
func TestRunMitigateUnsupported(t *testing.T) {
	o := &Config{PIDs: []int{os.Getpid()}, Listen: "127.0.0.1:0", Window: time.Minute, Once: time.Second,
		Mitigate: "slice=100us", Sched: einvalSched{},
		Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 }, Capabilities: allCaps,
		LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
			t.Fatal("probe loaded on a kernel without custom slices")
			return nil, nil
		}}
	err := Run(context.Background(), o)
	if !errors.Is(err, mitigate.ErrUnsupported) || errors.Is(err, ErrRequest) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want a one-line failure wrapping ErrUnsupported", err)
	}
	t.Log(err)
}

// The agent, a real process, sets the slice of a watched process that a
// busy loop contends with, and puts it back when SIGTERM stops it.
func TestMitigateRestoredOnSIGTERM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	if _, err := mitigate.Check(mitigate.System, uint64(100*time.Microsecond)); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	pid := contended(t, 1)[0]
	before := schedtest.Runtime(t, pid)

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(self)
	agent.Env = append(os.Environ(), envAgentPID+"="+strconv.Itoa(pid))
	var stderr bytes.Buffer
	agent.Stderr = &stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	defer agent.Process.Kill()

	for deadline := time.Now().Add(30 * time.Second); schedtest.Runtime(t, pid) != uint64(100*time.Microsecond); time.Sleep(20 * time.Millisecond) {
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
	if got := schedtest.Runtime(t, pid); got != before {
		t.Fatalf("slice %d after the agent stopped, want %d back\n%s", got, before, stderr.String())
	}
}
