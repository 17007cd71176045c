package hintfeed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/internal/tmpfstest"
)

// envChild makes the test binary the watched program (childMain).
const envChild = "HINTFEED_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain prints its main thread's id, then on each line read from
// stdin starts one more OS thread and prints that thread's id; it exits
// when stdin closes.
func childMain() int {
	runtime.LockOSThread()
	fmt.Println(unix.Gettid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		tid := make(chan int)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays parked
			tid <- unix.Gettid()
			select {}
		}()
		fmt.Println(<-tid)
	}
	return 0
}

// child is a running childMain.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func (c *child) tid(t *testing.T) int {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("child: no thread id: %v", c.out.Err())
	}
	tid, err := strconv.Atoi(strings.TrimSpace(c.out.Text()))
	if err != nil {
		t.Fatal(err)
	}
	return tid
}

// newThread asks the child for one more thread and returns its id.
func (c *child) newThread(t *testing.T) int {
	t.Helper()
	if _, err := io.WriteString(c.stdin, "\n"); err != nil {
		t.Fatal(err)
	}
	return c.tid(t)
}

// startChild starts childMain through f.Inherit, as apps starts a program.
func startChild(t *testing.T, f *Feed) (*child, int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: exec.Command(self)}
	c.cmd.Env = append(os.Environ(), envChild+"=1")
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewScanner(stdout)
	if err := f.Inherit(c.cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stdin.Close(); c.cmd.Process.Kill(); c.cmd.Wait() })
	return c, c.tid(t)
}

// startFeed starts a feed with o, skipping where this machine cannot.
func startFeed(t *testing.T, o Options) *Feed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the eBPF scheduler programs and sets another process's slice (CI runs as root)")
	}
	f, err := Start(context.Background(), o)
	if errors.Is(err, mitigate.ErrUnsupported) {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	if err != nil && o.Hints && strings.Contains(err.Error(), "BPF") {
		t.Skipf("cannot load the eBPF programs here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// runtimeOf is the thread's sched_runtime as the kernel reports it.
func runtimeOf(t *testing.T, tid int) time.Duration {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatalf("sched_getattr %d: %v", tid, err)
	}
	return time.Duration(a.Runtime)
}

// waitMitigation polls the page for tid's mitigation until it reads as
// want says, for up to 2 s (the publisher refreshes every 20 ms).
func waitMitigation(h *signal.HintSource, tid int, want bool) (time.Duration, bool) {
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		d, ok := h.Mitigation(tid)
		if ok == want || time.Now().After(end) {
			return d, ok
		}
	}
}

// TestHintsAndMitigation: with both on, a real process started through
// Inherit and watched with WatchProcess has the kernel's 100 µs slice and
// its page carries it in the slot of its main thread, and of a thread it
// starts later (found by the re-scan), where signal.HintSource reads
// it; Unwatch removes the page and puts the default slice back.
func TestHintsAndMitigation(t *testing.T) {
	const slice = 100 * time.Microsecond
	f := startFeed(t, Options{Kind: targets.KindPID, Hints: true, Mitigation: &mitigate.Config{Slice: slice}})
	defer func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}()
	c, pid := startChild(t, f)
	if got := runtimeOf(t, pid); got != slice {
		t.Fatalf("the program's slice from its start: %v, want %v", got, slice)
	}
	if err := f.WatchProcess("program", pid, 0, 0); err != nil {
		t.Fatal(err)
	}
	h := signal.NewHintSource(f.Path("program"), nil, nil)
	if got, ok := waitMitigation(h, pid, true); !ok || got != slice {
		t.Fatalf("HintSource.Mitigation(%d) = %v %v, want %v", pid, got, ok, slice)
	}
	late := c.newThread(t)
	if got, ok := waitMitigation(h, late, true); !ok || got != slice {
		t.Fatalf("a thread started later: HintSource.Mitigation(%d) = %v %v, want %v", late, got, ok, slice)
	}
	f.Unwatch("program")
	// The publisher's reaper removes it, in the background.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		_, err := os.Stat(f.Path("program"))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("page %s still there a minute after Unwatch: %v", f.Path("program"), err)
			break
		}
	}
	if got := runtimeOf(t, pid); got == slice {
		t.Errorf("after Unwatch the program keeps the slice %v", got)
	}
}

// TestHintsOnly: without a mitigation the page's slots say "not
// mitigated" and the process keeps the kernel's slice.
func TestHintsOnly(t *testing.T) {
	f := startFeed(t, Options{Kind: targets.KindPID, Hints: true})
	defer f.Close()
	if f.Mitigates() || !f.Hints() {
		t.Fatalf("Mitigates %v Hints %v, want false true", f.Mitigates(), f.Hints())
	}
	_, pid := startChild(t, f)
	before := runtimeOf(t, pid)
	if err := f.Watch("program", []int{pid}, 0, 0); err != nil {
		t.Fatal(err)
	}
	h := signal.NewHintSource(f.Path("program"), nil, nil)
	var s hintpage.Slot
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := h.ReadSlot(pid, clock.Now(), &s); ok {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no fresh slot for %d in %s", pid, f.Path("program"))
		}
	}
	if got, ok := h.Mitigation(pid); ok {
		t.Errorf("not mitigated, but the slot says %v", got)
	}
	if got := runtimeOf(t, pid); got != before {
		t.Errorf("slice changed without a mitigation: %v, was %v", got, before)
	}
}

// TestMitigationOnly: without hints no page is made (nor eBPF loaded),
// and a watched process's threads get the slice until Unwatch.
func TestMitigationOnly(t *testing.T) {
	const slice = 200 * time.Microsecond
	f := startFeed(t, Options{Kind: targets.KindPID, Mitigation: &mitigate.Config{Slice: slice}})
	defer f.Close()
	if f.Hints() || f.Path("x") != "" {
		t.Fatalf("a page without hints: %q", f.Path("x"))
	}
	// Started plainly, not through Inherit: the slice comes from Watch.
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envChild+"=1")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	if got := runtimeOf(t, pid); got == slice {
		t.Fatalf("slice %v before Watch", got)
	}
	if err := f.WatchProcess("program", pid, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := runtimeOf(t, pid); got != slice {
		t.Errorf("watched: slice %v, want %v", got, slice)
	}
	f.Unwatch("program")
	if got := runtimeOf(t, pid); got == slice {
		t.Errorf("after Unwatch: slice %v kept", got)
	}
}

// TestPageDirectoryFillsUp: the page directory fills up while the feed
// runs (any local user can fill /dev/shm). The next target's page is
// refused (ENOSPC, not a SIGBUS when it is first written), the page that
// exists keeps being written, and Close puts every slice back and leaves
// nothing but the filler in the directory.
func TestPageDirectoryFillsUp(t *testing.T) {
	const slice = 100 * time.Microsecond
	dir := tmpfstest.Mount(t, 16<<10, "mode=0755")
	f := startFeed(t, Options{Kind: targets.KindPID, Hints: true, Dir: dir, Mitigation: &mitigate.Config{Slice: slice}})
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
	}()
	_, a := startChild(t, f)
	if err := f.WatchProcess("a", a, 0, 0); err != nil {
		t.Fatal(err)
	}
	filler := tmpfstest.Fill(t, dir)
	// b spins beside another process's busy loop on its CPU: contended,
	// so the gate gives it the slice, page or not.
	cpu := strconv.Itoa(runtime.NumCPU() - 1)
	b := exec.Command("taskset", "-c", cpu, "sh", "-c", "while :; do :; done")
	co := exec.Command("taskset", "-c", cpu, "sh", "-c", "while :; do :; done")
	for _, c := range []*exec.Cmd{b, co} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { c.Process.Kill(); c.Wait() }()
	}
	before := runtimeOf(t, b.Process.Pid)
	err := f.WatchProcess("b", b.Process.Pid, 0, 0)
	if err == nil {
		t.Fatal("a page was made in a full directory")
	}
	t.Log(err)
	got := runtimeOf(t, b.Process.Pid)
	for end := time.Now().Add(30 * time.Second); got != slice && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		got = runtimeOf(t, b.Process.Pid)
	}
	if got != slice {
		t.Errorf("the contended target without a page: slice %v, want the mitigation's %v all the same", got, slice)
	}
	h := signal.NewHintSource(f.Path("a"), nil, nil)
	var sl hintpage.Slot
	ok := false
	for end := time.Now().Add(2 * time.Second); !ok && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		_, ok = h.ReadSlot(a, clock.Now(), &sl)
	}
	if !ok {
		t.Fatalf("the page made before the directory filled: no slot for %d", a)
	}
	f.Unwatch("b")
	f.Unwatch("a")
	closed = true
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := runtimeOf(t, b.Process.Pid); got != before {
		t.Errorf("slice %v after Close, want %v back", got, before)
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 1 || es[0].Name() != filepath.Base(filler) {
		t.Errorf("directory holds %v, want the filler only", es)
	}
}
