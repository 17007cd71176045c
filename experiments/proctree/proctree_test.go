package proctree

import (
	"os"
	"os/exec"
	"slices"
	"testing"
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
