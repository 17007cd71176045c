package targets

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// A thread's vCPU index is its libvirt vcpuN cgroup's N; its name counts
// for nothing: 4245 is called "CPU 7/KVM" and sits in a vcpu7 cgroup a
// user made, outside the machine slice.
func TestPIDThreadsAndVCPUCgroups(t *testing.T) {
	p, err := newPID("testdata/proc", 4242, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := p.scan()
	if err != nil {
		t.Fatal(err)
	}
	want := []Thread{{TID: 4242, VCPU: -1}, {TID: 4243, VCPU: 0}, {TID: 4244, VCPU: 1}, {TID: 4245, VCPU: -1}}
	if !tg.Equal(Target{Kind: KindPID, Name: "4242", Threads: want}) {
		t.Fatalf("got %+v", tg)
	}
	if _, err := newPID("testdata/proc", 4343, time.Second); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("missing pid: %v", err)
	}
	if _, err := NewPID(-1, time.Second); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("pid -1: %v", err)
	}
}

// A real process: Added with its thread, then Removed once it exits.
func TestPIDSourceFollowsProcess(t *testing.T) {
	cmd := exec.Command("sleep", "0.3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait() // reap it, so /proc/<pid> goes away
	src, err := NewPID(cmd.Process.Pid, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch := src.Run(ctx)
	ev := <-ch
	if ev.Kind != Added || len(ev.Target.Threads) != 1 || ev.Target.Threads[0].TID != cmd.Process.Pid {
		t.Fatalf("first event %+v", ev)
	}
	ev, ok := <-ch
	if !ok || ev.Kind != Removed {
		t.Fatalf("after exit: %+v (open %v), want Removed", ev, ok)
	}
	if _, ok := <-ch; ok {
		t.Fatal("channel still open after Removed")
	}
}

// A real process tree: a shell and the two processes it started, one of
// them started after the first scan, are one target; a plain PID source
// of the shell has the shell's thread only.
func TestProcessTreeFollowsChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & read x; sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	threads := func(src *PID) []Thread {
		tg, err := src.scan()
		if err != nil {
			t.Fatal(err)
		}
		return tg.Threads
	}
	waitFor := func(src *PID, n int) []Thread {
		var th []Thread
		for deadline := time.Now().Add(10 * time.Second); len(th) != n && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			th = threads(src)
		}
		return th
	}
	tree, err := NewProcessTree(cmd.Process.Pid, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if th := waitFor(tree, 2); len(th) != 2 {
		t.Fatalf("tree before the second child: %+v, want the shell and one sleeper", th)
	}
	in.Write([]byte("go\n"))
	th := waitFor(tree, 3)
	if len(th) != 3 || !slices.ContainsFunc(th, func(x Thread) bool { return x.TID == cmd.Process.Pid && x.VCPU == -1 }) {
		t.Fatalf("tree: %+v, want the shell (no vCPU) and two sleepers", th)
	}
	one, err := NewPID(cmd.Process.Pid, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if th := threads(one); len(th) != 1 {
		t.Errorf("NewPID of the shell: %+v, want its one thread", th)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Cgroup layouts as files (the real hierarchies are exercised by the
// quota test in agent/monitor): v2 with cpu.max and cgroup.threads, v1
// with cpu.cfs_* and tasks, libvirt's vcpuN children.
func TestCgroupScanV1AndV2(t *testing.T) {
	v2 := t.TempDir()
	writeFiles(t, v2, map[string]string{
		"cgroup.procs":            "10\n",
		"cgroup.threads":          "10\n11\n",
		"cpu.max":                 "50000 100000\n",
		"vcpu0/cgroup.procs":      "",
		"vcpu0/cgroup.threads":    "20\n",
		"vcpu1/cgroup.procs":      "",
		"vcpu1/cgroup.threads":    "21\n",
		"emulator/cgroup.procs":   "",
		"emulator/cgroup.threads": "30\n",
	})
	c, err := NewCgroup(v2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := c.scan()
	if err != nil {
		t.Fatal(err)
	}
	want := Target{Kind: KindCgroup, Name: v2, PeriodUS: 100000, QuotaUS: 50000, Threads: []Thread{
		{TID: 10, VCPU: -1}, {TID: 11, VCPU: -1}, {TID: 20, VCPU: 0}, {TID: 21, VCPU: 1}, {TID: 30, VCPU: -1}}}
	if !tg.Equal(want) {
		t.Fatalf("v2: got %+v", tg)
	}

	v1 := t.TempDir()
	writeFiles(t, v1, map[string]string{
		"cgroup.procs":      "5\n",
		"tasks":             "5\n6\n",
		"cpu.cfs_quota_us":  "-1\n",
		"cpu.cfs_period_us": "100000\n",
	})
	writeFiles(t, v1, map[string]string{"cpu.cfs_quota_us": "25000\n"})
	c, err = NewCgroup(v1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tg, err = c.scan()
	if err != nil {
		t.Fatal(err)
	}
	if tg.QuotaUS != 25000 || tg.PeriodUS != 100000 || len(tg.Threads) != 2 {
		t.Fatalf("v1: got %+v", tg)
	}
	if _, err := NewCgroup(filepath.Join(v2, "nope"), time.Second); !errors.Is(err, ErrNoCgroup) {
		t.Fatalf("missing cgroup: %v", err)
	}
}

// A domain whose QEMU main thread changed (a restart under the same vCPU
// thread ids is unlikely, but a description read before /proc answered
// has none) is a new description: the mitigation must see it.
func TestEqualHelpers(t *testing.T) {
	a := Target{Kind: KindDomain, Name: "d", Threads: []Thread{{TID: 2, VCPU: 0}}, Helpers: []int{1}}
	b := a
	b.Helpers = nil
	if a.Equal(b) || !a.Equal(a) {
		t.Errorf("Equal ignores Helpers: %v vs %v", a.Helpers, b.Helpers)
	}
}
