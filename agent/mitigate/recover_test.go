package mitigate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/runstate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
	"github.com/vgpu-probe/vgpu-probe/internal/tmpfstest"
)

// envAgentTarget makes the test binary an agent that mitigates the
// process it names with a journal in envAgentState, says "set", and waits
// to be killed.
const (
	envAgentTarget = "MITIGATE_TEST_AGENT_TARGET"
	envAgentState  = "MITIGATE_TEST_AGENT_STATE"
)

func agentChild(pidArg string) int {
	pid, _ := strconv.Atoi(pidArg)
	m, err := New(Options{Slice: slice, Log: zerolog.Nop(), StateDir: os.Getenv(envAgentState)})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	p, err := targets.NewPID(pid, time.Hour)
	if err == nil {
		var tg targets.Target
		if tg, err = p.Scan(); err == nil {
			m.Apply(targets.Event{Kind: targets.Added, Target: tg})
		}
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("set")
	select {}
}

// startAgent runs agentChild on pid and waits until it has set the slices.
func startAgent(t *testing.T, pid int, state string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envAgentTarget+"="+strconv.Itoa(pid), envAgentState+"="+state)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "set\n" {
		t.Fatalf("agent: %q", line)
	}
	return cmd
}

// An agent killed with SIGKILL leaves its slices and its journal; the
// next mitigator to start there puts back what each thread had (a custom
// slice, or the default), including a thread that inherited the slice
// after the crash, and then mitigates and restores as usual: nothing of
// either is left.
func TestRecoverAfterKill(t *testing.T) {
	newMitigator(t) // skips without custom slices
	state := t.TempDir()
	c := startChild(t)
	custom := c.newThread(t)
	a, _ := unix.SchedGetAttr(custom, 0)
	a.Runtime = uint64(5 * time.Millisecond)
	if err := unix.SchedSetAttr(custom, a, 0); err != nil {
		t.Fatal(err)
	}
	before := map[int]uint64{}
	for _, th := range c.target(t).Threads {
		before[th.TID] = schedtest.Runtime(t, th.TID)
	}

	ag := startAgent(t, c.cmd.Process.Pid, state)
	// Another agent may not take the process meanwhile.
	m2, err := New(Options{Slice: slice, Log: zerolog.Nop(), StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	var held *runstate.HeldError
	if err := m2.Claim(c.cmd.Process.Pid); !errors.As(err, &held) || held.PID != ag.Process.Pid {
		t.Fatalf("claim of a process another agent mitigates: %v, want its pid %d", err, ag.Process.Pid)
	}
	m2.Stop()
	ag.Process.Kill()
	ag.Wait()
	for tid := range before {
		if got := schedtest.Runtime(t, tid); got != uint64(slice) {
			t.Fatalf("thread %d: %d ns after the agent was killed, want its slice %d", tid, got, slice)
		}
	}
	inherited := c.newThread(t) // made by a thread with the slice
	if got := schedtest.Runtime(t, inherited); got != uint64(slice) {
		t.Fatalf("new thread %d ns: the slice is not inherited here", got)
	}

	if n, err := Recover(state, nil, zerolog.Nop()); err != nil || n == 0 {
		t.Fatalf("recovery: %d threads, %v", n, err)
	}
	m, err := New(Options{Slice: 2 * slice, Log: zerolog.Nop(), StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	for tid, want := range before {
		if got := schedtest.Runtime(t, tid); got != want {
			t.Errorf("thread %d: %d ns after recovery, want %d", tid, got, want)
		}
	}
	base := schedtest.Runtime(t, inherited)
	if base == uint64(slice) {
		t.Errorf("inherited thread kept the dead agent's slice")
	}
	tg := c.target(t)
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	for _, th := range tg.Threads {
		if got := schedtest.Runtime(t, th.TID); got != uint64(2*slice) {
			t.Errorf("thread %d: %d ns, want the new slice", th.TID, got)
		}
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	for tid, want := range before {
		if got := schedtest.Runtime(t, tid); got != want {
			t.Errorf("thread %d: %d ns after Stop, want %d", tid, got, want)
		}
	}
	if got := schedtest.Runtime(t, inherited); got != base {
		t.Errorf("inherited thread: %d ns after Stop, want the default %d", got, base)
	}
	runstate.Sweep(state)
	if es, _ := os.ReadDir(state); len(es) != 0 {
		t.Errorf("state left: %v", es)
	}
}

// A journal's thread whose tid now names another thread (same tid,
// another start time) is left alone.
func TestRecoverSkipsReusedTID(t *testing.T) {
	newMitigator(t)
	state := t.TempDir()
	c := startChild(t)
	tid := c.newThread(t)
	a, _ := unix.SchedGetAttr(tid, 0)
	a.Runtime = uint64(slice)
	if err := unix.SchedSetAttr(tid, a, 0); err != nil {
		t.Fatal(err)
	}
	start, err := runstate.StartTime(tid)
	if err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf(`{"pid":1,"slice_ns":%d,"threads":[{"tid":%d,"start":%d,"restore_ns":0}]}`, uint64(slice), tid, start+1)
	if err := os.WriteFile(state+"/slices-1.json", []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := Recover(state, nil, zerolog.Nop()); n != 0 || err != nil {
		t.Fatalf("restored %d (%v): a reused tid was touched", n, err)
	}
	if got := schedtest.Runtime(t, tid); got != uint64(slice) {
		t.Fatalf("thread of a reused tid changed to %d", got)
	}
}

// The state directory fills up while threads are being mitigated: a
// thread whose record cannot be written does not get the slice (a crash
// would leave it unrestorable), every thread that has it is in the
// journal, and Stop restores them all and removes the journal.
func TestJournalFull(t *testing.T) {
	newMitigator(t)
	state := tmpfstest.Mount(t, 4096)
	failed := 0
	m, err := New(Options{Slice: slice, Log: zerolog.Nop(), StateDir: state, Failed: func() { failed++ }})
	if err != nil {
		t.Fatal(err)
	}
	tmpfstest.Fill(t, state) // the journal keeps the one page it has
	c := startChild(t)
	for range 80 { // ~80 bytes a record: more than a page
		c.newThread(t)
	}
	tg := c.target(t)
	before := map[int]uint64{}
	for _, th := range tg.Threads {
		before[th.TID] = schedtest.Runtime(t, th.TID)
	}
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})

	b, err := os.ReadFile(fmt.Sprintf("%s/slices-%d.json", state, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	var rec runstate.Record
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&rec); err != nil {
		t.Fatalf("journal unreadable after ENOSPC: %v", err)
	}
	recorded := map[int]bool{}
	for _, s := range rec.Threads {
		recorded[s.TID] = true
	}
	set := 0
	for _, th := range tg.Threads {
		if schedtest.Runtime(t, th.TID) == uint64(slice) {
			set++
			if !recorded[th.TID] {
				t.Errorf("thread %d has the slice but no record", th.TID)
			}
		}
	}
	if set == 0 || set == len(tg.Threads) || failed != len(tg.Threads)-set {
		t.Fatalf("%d of %d threads set, %d failures: want some set, the rest counted", set, len(tg.Threads), failed)
	}
	t.Logf("%d of %d threads recorded and set in a full state directory", set, len(tg.Threads))
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	for tid, want := range before {
		if got := schedtest.Runtime(t, tid); got != want {
			t.Errorf("thread %d: %d ns after Stop, want %d", tid, got, want)
		}
	}
	if es, _ := os.ReadDir(state); len(es) != 1 {
		t.Errorf("state directory holds %v, want the filler only", es)
	}
}
