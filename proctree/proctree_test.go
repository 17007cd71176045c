package proctree

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestFindsChild starts a real child with a marker in its environment and
// finds it both ways; once it is reaped, neither finds it.
func TestFindsChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "PROCTREE_TEST=1")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	pid := cmd.Process.Pid
	if !slices.Contains(Children(os.Getpid()), pid) {
		t.Errorf("Children misses %d", pid)
	}
	if got := WithEnv("PROCTREE_TEST=1"); !slices.Equal(got, []int{pid}) {
		t.Errorf("WithEnv = %v, want [%d]", got, pid)
	}
	if Env(pid, "PROCTREE_TEST") != "1" {
		t.Errorf("Env of %d: %q", pid, Env(pid, "PROCTREE_TEST"))
	}
	cmd.Process.Kill()
	cmd.Wait()
	if slices.Contains(Children(os.Getpid()), pid) || len(WithEnv("PROCTREE_TEST=1")) != 0 {
		t.Errorf("%d still found after it was reaped", pid)
	}
}

// TestGroupAndCPU: a real shell in a process group of its own, with a
// background child, does some work: Group finds both, and CPU reads the
// shell's time as the kernel's rusage gives it once the shell is reaped.
func TestGroupAndCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sleep 30 & i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	pid := cmd.Process.Pid
	defer syscall.Kill(-pid, syscall.SIGKILL)
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "done\n" {
		t.Fatalf("sh wrote %q, %v", line, err)
	}
	group := Group(pid)
	kids := Children(pid)
	if len(group) != 2 || !slices.Contains(group, pid) || len(kids) != 1 || !slices.Contains(group, kids[0]) {
		t.Fatalf("Group(%d) = %v, children %v: want the shell and its sleep", pid, group, kids)
	}
	if slices.Contains(Group(syscall.Getpgrp()), pid) {
		t.Errorf("the shell found in this test's process group")
	}
	got, ok := CPU(pid)
	if !ok {
		t.Fatalf("CPU(%d): gone", pid)
	}
	syscall.Kill(kids[0], syscall.SIGKILL) // the shell's wait returns
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	u := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	want := time.Duration(syscall.TimevalToNsec(u.Utime) + syscall.TimevalToNsec(u.Stime))
	// The shell's last instructions (reading "done", wait) fall between
	// the two readings; /proc's times are in 10 ms ticks.
	if got <= 0 || got > want+clockTick || want-got > 3*clockTick {
		t.Errorf("CPU = %v while the shell waited, rusage after it exited %v", got, want)
	}
	if _, ok := CPU(pid); ok {
		t.Errorf("CPU(%d) after it was reaped: want gone", pid)
	}
	t.Logf("CPU %v, rusage %v", got, want)
}
