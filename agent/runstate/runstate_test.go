package runstate

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// envHold makes the test binary take the lock named by it in the
// directory named by envDir, say so, and wait to be killed.
const (
	envHold = "RUNSTATE_TEST_HOLD"
	envDir  = "RUNSTATE_TEST_DIR"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envHold); name != "" {
		if _, err := Acquire(os.Getenv(envDir), name, "test"); err != nil {
			os.Stdout.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		select {}
	}
	os.Exit(m.Run())
}

// holder is another process holding a lock, killed with SIGKILL.
func holder(t *testing.T, dir, name string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envHold+"="+name, envDir+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("holder: %q", line)
	}
	return cmd
}

// A lock another live process holds is refused naming that process; once
// it is killed (the kernel drops its lock), the lock is free, and Sweep
// removes the file it left.
func TestLockHeldThenDead(t *testing.T) {
	dir := t.TempDir()
	h := holder(t, dir, "x")
	_, err := Acquire(dir, "x", "thing x")
	var held *HeldError
	if !errors.As(err, &held) || held.PID != h.Process.Pid {
		t.Fatalf("got %v, want HeldError naming pid %d", err, h.Process.Pid)
	}
	t.Log(err)
	h.Process.Kill()
	h.Wait()
	Sweep(dir)
	if _, err := os.Stat(filepath.Join(dir, "x.lock")); !os.IsNotExist(err) {
		t.Fatalf("dead owner's lock file after Sweep: %v", err)
	}
	l, err := Acquire(dir, "x", "thing x")
	if err != nil {
		t.Fatal(err)
	}
	// A live lock survives Sweep, and another Acquire in this process
	// too is refused (flock is per open file).
	Sweep(dir)
	if _, err := Acquire(dir, "x", "thing x"); !errors.As(err, &held) || held.PID != os.Getpid() {
		t.Fatalf("second Acquire of a held lock: %v", err)
	}
	l.Release()
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Fatalf("left after Release: %v", es)
	}
}

// A live agent's journal is not touched; a dead one's is handed over once
// and removed.
func TestOrphans(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal(dir, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Put(Slice{TID: 7, Start: 9, TGID: 7, TGIDStart: 9, Restore: 0}); err != nil {
		t.Fatal(err)
	}
	if err := j.Put(Slice{TID: 8, Start: 10, TGID: 7, TGIDStart: 9, Restore: 3_000_000}); err != nil {
		t.Fatal(err)
	}
	if err := j.Delete(7); err != nil {
		t.Fatal(err)
	}
	var got []Record
	collect := func(r Record) error { got = append(got, r); return nil }
	if err := Orphans(dir, collect); err != nil || len(got) != 0 {
		t.Fatalf("live journal handed over: %v %v", got, err)
	}
	// Dead: as the kernel drops an exited agent's lock.
	j.f.Close()
	j.f = nil
	if err := Orphans(dir, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].SliceNs != 100_000 || len(got[0].Threads) != 1 || got[0].Threads[0] != (Slice{TID: 8, Start: 10, TGID: 7, TGIDStart: 9, Restore: 3_000_000}) {
		t.Fatalf("orphan %+v, want the one thread left", got)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Fatalf("journal left after recovery: %v", es)
	}
}

func TestStartTime(t *testing.T) {
	a, err := StartTime(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("%d %v", a, err)
	}
	if _, err := StartTime(1 << 30); err == nil {
		t.Fatal("start time of a pid that cannot exist")
	}
}
