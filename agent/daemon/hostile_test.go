package daemon

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
	"github.com/vgpu-probe/vgpu-probe/internal/tmpfstest"
)

// The agent under hostile conditions, as a real process (the test binary
// running Run, as main does) on real processes, with real eBPF, real
// slices and real tmpfs mounts.

const (
	slice100 = uint64(100 * time.Microsecond)
	slice200 = uint64(200 * time.Microsecond)
)

// lockedBuffer is an agent's stderr, read while the agent writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type agentProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
}

// needAgent skips where the agent cannot mitigate: not root, or a kernel
// without custom slices.
func needAgent(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs and sets other processes' slices: needs root")
	}
	if _, err := mitigate.Check(mitigate.System, slice100); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
}

// runAgent starts the agent on pids with --mitigate slice=SLICE, --hints
// hints ("" none), the state directory state, and env (more of agentMain's
// settings, NAME=VALUE).
func runAgent(t *testing.T, pids []int, slice, hints, state string, env ...string) *agentProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var ps []string
	for _, p := range pids {
		ps = append(ps, strconv.Itoa(p))
	}
	a := &agentProc{cmd: exec.Command(self), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	a.cmd.Env = append(os.Environ(), envAgentPID+"="+strings.Join(ps, ","), envAgentSlice+"="+slice,
		envAgentHints+"="+hints, envAgentState+"="+state)
	a.cmd.Env = append(a.cmd.Env, env...)
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() { a.cmd.Process.Kill(); <-a.exited })
	return a
}

// waitSlices waits until every tid has want, failing if the agent exits.
func (a *agentProc) waitSlices(t *testing.T, want uint64, tids ...int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		all := true
		for _, tid := range tids {
			all = all && schedtest.Runtime(t, tid) == want
		}
		if all {
			return
		}
		select {
		case <-a.exited:
			if a.cmd.ProcessState.ExitCode() == 3 {
				t.Skipf("kernel does not let root load BPF: %s", a.stderr.String())
			}
			t.Fatalf("agent exited (%v) before setting the slices:\n%s", a.cmd.ProcessState, a.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not set slice %d on %v:\n%s", want, tids, a.stderr.String())
		}
	}
}

// stop sends SIGTERM and wants a clean exit.
func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not stop on SIGTERM:\n%s", a.stderr.String())
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("agent exit status %d after SIGTERM:\n%s", code, a.stderr.String())
	}
}

// refused waits for an agent that must refuse to start: exit status 2,
// one line on stderr, naming what.
func (a *agentProc) refused(t *testing.T, what string) {
	t.Helper()
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not refuse:\n%s", a.stderr.String())
	}
	out := strings.TrimSuffix(a.stderr.String(), "\n")
	if code := a.cmd.ProcessState.ExitCode(); code != 2 || strings.Contains(out, "\n") || !strings.Contains(out, what) {
		t.Fatalf("exit status %d, stderr %q: want 2 and one line naming %q", code, out, what)
	}
	t.Log(out)
}

// contended starts n busy processes on one CPU beside a busy loop of
// another process: each is preempted by the others all the time, so the
// agent's --mitigate (gated on contention) gives their threads the
// slice.
func contended(t *testing.T, n int) []int {
	t.Helper()
	var pids []int
	for range n {
		pids = append(pids, busyLoop(t))
	}
	busyBeside(t, pids...)
	return pids
}

// busyLoop starts a busy shell loop, killed at the end of the test.
func busyLoop(t *testing.T) int {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c.Process.Pid
}

// busyBeside pins the threads tids to one CPU (the last this test may
// use) and starts a busy loop of another process there: while they run,
// another process's task takes their CPU.
func busyBeside(t *testing.T, tids ...int) {
	t.Helper()
	one := schedtest.LastCPU(t)
	for _, tid := range append(tids, busyLoop(t)) {
		if err := unix.SchedSetaffinity(tid, &one); err != nil {
			t.Fatalf("pinning thread %d: %v", tid, err)
		}
	}
}

func slicesOfTIDs(t *testing.T, tids []int) []uint64 {
	t.Helper()
	var out []uint64
	for _, tid := range tids {
		out = append(out, schedtest.Runtime(t, tid))
	}
	return out
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// A hints directory with room for two pages of three (the 8 KiB tmpfs of
// the report that crashed the agent with SIGBUS): the agent runs on,
// publishing what fits and mitigating all three, and SIGTERM leaves every
// slice as it was and nothing in the directory.
func TestAgentFullHintsDirectory(t *testing.T) {
	needAgent(t)
	dir := tmpfstest.Mount(t, 8<<10, "mode=0755")
	state := t.TempDir()
	pids := contended(t, 3)
	before := slicesOfTIDs(t, pids)
	a := runAgent(t, pids, "100us", dir, state)
	a.waitSlices(t, slice100, pids...)
	// The publisher retries the page that did not fit every 5 s: the
	// agent lives through a retry.
	select {
	case <-a.exited:
		t.Fatalf("agent died:\n%s", a.stderr.String())
	case <-time.After(6 * time.Second):
	}
	if !strings.Contains(a.stderr.String(), "no space left on device") {
		t.Errorf("no page refused for want of room:\n%s", a.stderr.String())
	}
	a.stop(t)
	if got := slicesOfTIDs(t, pids); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("slices %v after SIGTERM, want %v", got, before)
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("left in the hints directory: %v", got)
	}
	if got := dirNames(t, state); len(got) != 0 {
		t.Errorf("left in the state directory: %v", got)
	}
}

// A read-only hints directory: refused at start with one line, and no
// slice changed.
func TestAgentReadOnlyHintsDirectory(t *testing.T) {
	needAgent(t)
	dir := tmpfstest.Mount(t, 8<<10, "ro", "mode=0755")
	pids := contended(t, 1)
	before := schedtest.Runtime(t, pids[0])
	a := runAgent(t, pids, "100us", dir, t.TempDir())
	a.refused(t, "--hints "+dir)
	if got := schedtest.Runtime(t, pids[0]); got != before {
		t.Errorf("slice %d after the refusal, want %d", got, before)
	}
}

// SIGKILL, then a restart with another slice, then SIGTERM: the original
// slice is back (not the killed agent's), and the hints directory and the
// state directory hold nothing.
func TestAgentKilledThenRestarted(t *testing.T) {
	needAgent(t)
	dir := tmpfstest.Mount(t, 64<<10, "mode=0755")
	state := t.TempDir()
	pids := contended(t, 1)
	before := schedtest.Runtime(t, pids[0])
	a := runAgent(t, pids, "100us", dir, state)
	a.waitSlices(t, slice100, pids...)
	page := filepath.Join(dir, fmt.Sprintf("vgpu-probe-hints-%d", pids[0]))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(page); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page from the agent:\n%s", a.stderr.String())
		}
	}
	a.cmd.Process.Kill()
	<-a.exited
	if got := schedtest.Runtime(t, pids[0]); got != slice100 {
		t.Fatalf("slice %d after SIGKILL: the test needs the killed agent's slice left", got)
	}
	if len(dirNames(t, dir)) == 0 {
		t.Fatal("no page left by the killed agent: nothing to clean")
	}
	b := runAgent(t, pids, "200us", dir, state)
	b.waitSlices(t, slice200, pids...)
	b.stop(t)
	if got := schedtest.Runtime(t, pids[0]); got != before {
		t.Errorf("slice %d after kill -9, restart with 200us and SIGTERM, want the original %d", got, before)
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("left in the hints directory: %v", got)
	}
	if got := dirNames(t, state); len(got) != 0 {
		t.Errorf("left in the state directory: %v", got)
	}
}

// A second agent on the first's target, or on its hints directory, refuses
// with one line naming the first's pid, and leaves the first's slices
// and pages alone.
func TestSecondAgentRefused(t *testing.T) {
	needAgent(t)
	dir := tmpfstest.Mount(t, 64<<10, "mode=0755")
	state := t.TempDir()
	pids := contended(t, 2)
	first := runAgent(t, pids[:1], "100us", dir, state)
	first.waitSlices(t, slice100, pids[0])
	owner := fmt.Sprintf("(pid %d)", first.cmd.Process.Pid)

	runAgent(t, pids[:1], "200us", "", state).refused(t, owner)
	runAgent(t, pids[1:], "100us", dir, state).refused(t, owner)
	if got := schedtest.Runtime(t, pids[0]); got != slice100 {
		t.Errorf("the first agent's target has slice %d after the second refused, want %d", got, slice100)
	}
	if got := schedtest.Runtime(t, pids[1]); got == slice100 {
		t.Errorf("the refused agent's target kept a slice")
	}
	page := fmt.Sprintf("vgpu-probe-hints-%d", pids[0])
	if got := dirNames(t, dir); !slices.Contains(got, page) || slices.ContainsFunc(got, func(n string) bool {
		return strings.Contains(n, strconv.Itoa(pids[1]))
	}) {
		t.Errorf("hints directory %v after the second refused, want the first's %s and nothing of the second's", got, page)
	}
	first.stop(t)
}

// A failure after the slices and pages were made (the listen address is
// taken): the agent exits non-zero, with every slice back and nothing
// left in the hints or the state directory.
func TestAgentFailureUndoes(t *testing.T) {
	needAgent(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv(envAgentListen, ln.Addr().String())
	dir := tmpfstest.Mount(t, 64<<10, "mode=0755")
	state := t.TempDir()
	pids := contended(t, 2)
	before := slicesOfTIDs(t, pids)
	a := runAgent(t, pids, "100us", dir, state)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("agent still running on a taken address:\n%s", a.stderr.String())
	}
	if code := a.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(a.stderr.String(), "address already in use") {
		t.Fatalf("exit status %d, want a failure to listen:\n%s", code, a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "slices restored") {
		t.Logf("the agent failed before it set a slice (nothing to restore this time):\n%s", a.stderr.String())
	}
	if got := slicesOfTIDs(t, pids); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("slices %v after the failure, want %v", got, before)
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("left in the hints directory: %v", got)
	}
	if got := dirNames(t, state); len(got) != 0 {
		t.Errorf("left in the state directory: %v", got)
	}
}
