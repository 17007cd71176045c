package mitigate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

const slice = 100 * time.Microsecond

func init() {
	if os.Getenv("MITIGATE_TEST_CHILD") != "" {
		// Keeps the main goroutine on the main thread, so that the
		// threads the child starts and ends are never the main thread,
		// which Go never lets exit.
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("MITIGATE_TEST_CHILD") != "" {
		os.Exit(threadsChild())
	}
	if pid := os.Getenv(envAgentTarget); pid != "" {
		os.Exit(agentChild(pid))
	}
	os.Exit(m.Run())
}

// threadsChild is a process whose threads the test controls: "new" starts
// a thread and prints its tid, "end" ends the newest one.
func threadsChild() int {
	var ends []chan struct{}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "new":
			end, tid := make(chan struct{}), make(chan int)
			go func() {
				// Never unlocked: the thread exits with the goroutine.
				runtime.LockOSThread()
				tid <- unix.Gettid()
				<-end
			}()
			ends = append(ends, end)
			fmt.Println(<-tid)
		case "end":
			close(ends[len(ends)-1])
			ends = ends[:len(ends)-1]
			fmt.Println("ok")
		}
	}
	return 0
}

type child struct {
	cmd *exec.Cmd
	in  io.Writer
	out *bufio.Scanner
}

func startChild(t *testing.T) *child {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "MITIGATE_TEST_CHILD=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
}

func (c *child) do(t *testing.T, what string) string {
	t.Helper()
	if _, err := io.WriteString(c.in, what+"\n"); err != nil {
		t.Fatal(err)
	}
	if !c.out.Scan() {
		t.Fatalf("child: no answer to %q: %v", what, c.out.Err())
	}
	return c.out.Text()
}

func (c *child) newThread(t *testing.T) int {
	t.Helper()
	tid, err := strconv.Atoi(c.do(t, "new"))
	if err != nil {
		t.Fatal(err)
	}
	return tid
}

func (c *child) target(t *testing.T) targets.Target {
	t.Helper()
	p, err := targets.NewPID(c.cmd.Process.Pid, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := p.Scan()
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// newMitigator skips where this kernel (or this user) cannot have custom
// slices; the refusal itself is tested with a simulated kernel.
func newMitigator(t *testing.T) *Mitigator {
	t.Helper()
	m, err := New(Options{Slice: slice, Log: zerolog.Nop()})
	if errors.Is(err, ErrUnsupported) || errors.Is(err, unix.EPERM) {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func niceOf(t *testing.T, tid int) int32 {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatalf("sched_getattr %d: %v", tid, err)
	}
	return a.Nice
}

// eventually polls cond for up to 10 s: the source re-scans on its own
// schedule.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A real process's threads get the slice, keep their nice value, and get
// the old slice back at Stop: the default for most, a custom one for the
// thread that had one.
func TestApplyRestore(t *testing.T) {
	m := newMitigator(t)
	c := startChild(t)
	niced, custom := c.newThread(t), c.newThread(t)
	if err := unix.Setpriority(unix.PRIO_PROCESS, niced, 5); err != nil {
		t.Fatal(err)
	}
	a, _ := unix.SchedGetAttr(custom, 0)
	a.Runtime = uint64(5 * time.Millisecond)
	if err := unix.SchedSetAttr(custom, a, 0); err != nil {
		t.Fatal(err)
	}
	tg := c.target(t)
	before := map[int]uint64{}
	for _, th := range tg.Threads {
		before[th.TID] = schedtest.Runtime(t, th.TID)
	}

	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	for _, th := range tg.Threads {
		if got := schedtest.Runtime(t, th.TID); got != uint64(slice) {
			t.Errorf("thread %d: runtime %d after Apply, want %d", th.TID, got, slice)
		}
	}
	if n := niceOf(t, niced); n != 5 {
		t.Errorf("nice %d after Apply, want 5", n)
	}

	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, th := range tg.Threads {
		if got := schedtest.Runtime(t, th.TID); got != before[th.TID] {
			t.Errorf("thread %d: runtime %d after Stop, want %d", th.TID, got, before[th.TID])
		}
	}
	if got := schedtest.Runtime(t, custom); got != uint64(5*time.Millisecond) {
		t.Errorf("the custom slice came back as %d", got)
	}
	if n := niceOf(t, niced); n != 5 {
		t.Errorf("nice %d after Stop, want 5", n)
	}
}

// Following a re-scanning source: a thread that appears gets the slice,
// one that exits is dropped without an error, and the target going
// restores nothing but raises nothing either.
func TestFollowsThreads(t *testing.T) {
	m := newMitigator(t)
	c := startChild(t)
	base := schedtest.Runtime(t, c.cmd.Process.Pid)
	src, err := targets.NewPID(c.cmd.Process.Pid, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := src.Run(ctx)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for ev := range events {
			m.Apply(ev)
		}
	}()
	defer func() { cancel(); <-drained }()

	pid := c.cmd.Process.Pid
	eventually(t, "the main thread to be mitigated", func() bool { return m.Mitigated(pid) })
	if got := schedtest.Runtime(t, pid); got != uint64(slice) {
		t.Fatalf("main thread runtime %d, want %d", got, slice)
	}
	tid := c.newThread(t)
	eventually(t, "the new thread to be mitigated", func() bool { return m.Mitigated(tid) })
	if got := schedtest.Runtime(t, tid); got != uint64(slice) {
		t.Fatalf("new thread runtime %d, want %d", got, slice)
	}
	c.do(t, "end")
	eventually(t, "the exited thread to be dropped", func() bool { return !m.Mitigated(tid) })

	cancel()
	<-drained
	if err := m.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := schedtest.Runtime(t, pid); got != base {
		t.Errorf("main thread runtime %d after Stop, want %d", got, base)
	}
}

func TestTargetGone(t *testing.T) {
	m := newMitigator(t)
	c := startChild(t)
	c.newThread(t)
	tg := c.target(t)
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	c.cmd.Process.Kill()
	c.cmd.Wait()
	// Stop before the source noticed: every thread is gone, no error.
	if err := m.Stop(); err != nil {
		t.Fatalf("Stop after the target exited: %v", err)
	}

	m = newMitigator(t)
	c = startChild(t)
	tg = c.target(t)
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	m.Apply(targets.Event{Kind: targets.Removed, Target: tg})
	for _, th := range tg.Threads {
		if m.Mitigated(th.TID) || schedtest.Runtime(t, th.TID) == uint64(slice) {
			t.Errorf("thread %d still mitigated after its target was removed", th.TID)
		}
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A process started under Inherit has the slice from the start, through
// fork and exec; the thread that started it is not reused.
func TestInherit(t *testing.T) {
	m := newMitigator(t)
	defer m.Stop()
	var cmd *exec.Cmd
	err := m.Inherit(func() error {
		cmd = exec.Command("sleep", "30")
		return cmd.Start()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if got := schedtest.Runtime(t, cmd.Process.Pid); got != uint64(slice) {
		t.Errorf("child started under Inherit: runtime %d, want %d", got, slice)
	}
}

// Inherit gives its thread back with the slice restored rather than
// ending it: a child started earlier from that thread with Pdeathsig (a
// benchmark's co-runner) would die with it.
func TestInheritKeepsItsThread(t *testing.T) {
	m := newMitigator(t)
	defer m.Stop()
	var tid int
	if err := m.Inherit(func() error { tid = unix.Gettid(); return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // a thread that ends goes by now
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
		t.Fatalf("Inherit's thread %d ended: %v", tid, err)
	}
	if got := schedtest.Runtime(t, tid); got == uint64(slice) {
		t.Errorf("Inherit's thread %d still has the slice", tid)
	}
}

// fakeSched plays a kernel: set may fail, and getattr may ignore what was
// set (as kernels before 6.12 do for SCHED_OTHER).
type fakeSched struct {
	setErr  error
	ignores bool
	rt      uint64
}

func (f *fakeSched) Get(int) (*unix.SchedAttr, error) {
	return &unix.SchedAttr{Size: unix.SizeofSchedAttr, Runtime: f.rt}, nil
}

func (f *fakeSched) Set(_ int, a *unix.SchedAttr) error {
	if f.setErr != nil {
		return f.setErr
	}
	if !f.ignores {
		f.rt = a.Runtime
	}
	return nil
}

func TestUnsupportedKernel(t *testing.T) {
	for name, s := range map[string]*fakeSched{
		"EINVAL":  {setErr: unix.EINVAL},
		"ignored": {ignores: true},
	} {
		_, err := New(Options{Slice: slice, Sched: s})
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: got %v, want ErrUnsupported", name, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "6.12") {
			t.Errorf("%s: %q is not a one-line refusal naming the kernel needed", name, msg)
		}
	}
	if _, err := New(Options{Slice: slice, Sched: &fakeSched{setErr: unix.EPERM}}); err == nil || errors.Is(err, ErrUnsupported) {
		t.Errorf("EPERM: got %v, want a plain error", err)
	}
	if _, err := New(Options{Slice: time.Second, Sched: &fakeSched{}}); err == nil {
		t.Error("a 1 s slice was accepted")
	}
}

// refusingSched plays an agent without CAP_SYS_NICE: the check on its own
// thread passes, and setting the slice of another user's thread (tid
// refused) fails with err.
type refusingSched struct {
	fakeSched
	refused int
	err     error
}

func (r *refusingSched) Set(tid int, a *unix.SchedAttr) error {
	if tid == r.refused {
		return r.err
	}
	return r.fakeSched.Set(tid, a)
}

// A thread whose slice cannot be set is counted, not only logged; one that
// exited meanwhile is not a failure.
func TestRefusedThreadCounted(t *testing.T) {
	target := targets.Target{Kind: targets.KindPID, Name: "4242", Threads: []targets.Thread{{TID: 4242, VCPU: -1}}}
	for _, c := range []struct {
		err  error
		want int
	}{{unix.EPERM, 1}, {unix.ESRCH, 0}} {
		failed := 0
		m, err := New(Options{Slice: slice, Sched: &refusingSched{refused: 4242, err: c.err}, Log: zerolog.Nop(), Failed: func() { failed++ }})
		if err != nil {
			t.Fatal(err)
		}
		madeUp(m)
		m.Apply(targets.Event{Kind: targets.Added, Target: target})
		if m.Mitigated(4242) || failed != c.want {
			t.Errorf("%v: mitigated %v, %d failures counted; want false and %d", c.err, m.Mitigated(4242), failed, c.want)
		}
	}
}

// A target's helpers (a domain's emulator thread) get the slice with its
// threads, and theirs back when the target goes.
func TestHelpers(t *testing.T) {
	m := newMitigator(t)
	defer m.Stop()
	c := startChild(t)
	vcpu, emulator := c.newThread(t), c.newThread(t)
	base := schedtest.Runtime(t, emulator)
	tg := targets.Target{Kind: targets.KindDomain, Name: "d",
		Threads: []targets.Thread{{TID: vcpu, VCPU: 0}}, Helpers: []int{emulator}}
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	for _, tid := range []int{vcpu, emulator} {
		if got := schedtest.Runtime(t, tid); got != uint64(slice) || !m.Mitigated(tid) {
			t.Errorf("thread %d: runtime %d (mitigated %v) after Apply, want %d", tid, got, m.Mitigated(tid), slice)
		}
	}
	m.Apply(targets.Event{Kind: targets.Removed, Target: tg})
	if got := schedtest.Runtime(t, emulator); got != base || m.Mitigated(emulator) {
		t.Errorf("helper: runtime %d (mitigated %v) after its target went, want %d", got, m.Mitigated(emulator), base)
	}
}
