package cpucap

import (
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

	"github.com/vgpu-probe/vgpu-probe/cgroups"
	"github.com/vgpu-probe/vgpu-probe/proctree"
)

func requireCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups (CI runs as root)")
	}
	if _, err := Detect(); err != nil {
		t.Skipf("no cgroup cpu controller on this machine: %v", err)
	}
}

// groupAndSleeper creates the group prefix-PID limited to 10 ms per 20 ms
// and starts a process to put in it; both go when the test ends.
func groupAndSleeper(t *testing.T, prefix string) (*Group, *exec.Cmd) {
	t.Helper()
	requireCgroups(t)
	g, err := Create(fmt.Sprintf("%s-%d", prefix, os.Getpid()), 10*time.Millisecond, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return g, cmd
}

// TestCreateLimitAddRemove makes a real group with a quota, puts a real
// process in it, reads the limit back from the kernel's files and removes
// the group with the process still inside.
func TestCreateLimitAddRemove(t *testing.T) {
	g, cmd := groupAndSleeper(t, "vgpu-probe-test")
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	procs, _ := os.ReadFile(filepath.Join(g.Path, "cgroup.procs"))
	if !strings.Contains(string(procs), fmt.Sprint(cmd.Process.Pid)) {
		t.Errorf("pid %d not in %s: %q", cmd.Process.Pid, g.Path, procs)
	}
	if q, p := cgroups.Quota(g.Path); q != 10*time.Millisecond || p != 20*time.Millisecond {
		t.Errorf("limit %v per %v, want 10ms per 20ms", q, p)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Remove", g.Path)
	}
}

// TestAddTree moves a real process tree, a shell and the two sleepers it
// started, into a group: each of the three is in it after.
func TestAddTree(t *testing.T) {
	g, _ := groupAndSleeper(t, "vgpu-probe-test-tree")
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // one kill ends the three
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	var kids []int
	for deadline := time.Now().Add(10 * time.Second); len(kids) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		kids = proctree.Children(cmd.Process.Pid)
	}
	if len(kids) != 2 {
		t.Fatalf("the shell's children: %v, want two sleepers", kids)
	}
	if err := g.AddTree(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	procs, _ := os.ReadFile(filepath.Join(g.Path, "cgroup.procs"))
	for _, p := range append(kids, cmd.Process.Pid) {
		if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(p)) {
			t.Errorf("pid %d not in %s: %q", p, g.Path, procs)
		}
	}
	if err := g.AddTree(1 << 30); err == nil {
		t.Error("AddTree of a pid that does not exist: no error")
	}
}

// TestAddThread puts one thread under the limit (here the only thread of
// a child process): in v1 through tasks, in v2 through a threaded child
// that takes the group's limit; Remove removes both.
func TestAddThread(t *testing.T) {
	g, cmd := groupAndSleeper(t, "vgpu-probe-test-thread")
	pid := cmd.Process.Pid
	if err := g.AddThread(pid, pid); err != nil {
		t.Fatal(err)
	}
	read := func(parts ...string) string {
		b, _ := os.ReadFile(filepath.Join(append([]string{g.Path}, parts...)...))
		return strings.TrimSpace(string(b))
	}
	if g.Version == V1 {
		if !strings.Contains(read("tasks"), fmt.Sprint(pid)) {
			t.Errorf("thread %d not in %s/tasks", pid, g.Path)
		}
	} else {
		if !strings.Contains(read(threadedChild, "cgroup.threads"), fmt.Sprint(pid)) || read(threadedChild, "cpu.max") != "10000 20000" ||
			!strings.HasPrefix(read("cpu.max"), "max") || read(threadedChild, "cgroup.type") != "threaded" {
			t.Errorf("v2: threads %q limit %q, group limit %q, type %q", read(threadedChild, "cgroup.threads"),
				read(threadedChild, "cpu.max"), read("cpu.max"), read(threadedChild, "cgroup.type"))
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Remove", g.Path)
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	requireCgroups(t)
	for _, name := range []string{"", "a/b", ".."} {
		if _, err := Create(name, 0, 0); err == nil {
			t.Errorf("Create(%q) accepted", name)
		}
	}
	name := fmt.Sprintf("vgpu-probe-test-bad-%d", os.Getpid())
	if g, err := Create(name, time.Millisecond, time.Hour); err == nil {
		g.Remove()
		t.Error("a one-hour period was accepted")
	}
	if _, err := os.Stat(filepath.Join(Root, "cpu", name)); err == nil {
		t.Error("a failed Create left its cgroup behind")
	}
}
