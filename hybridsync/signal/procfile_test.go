package signal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The readers parse what the kernel writes and reject what it does not.
func TestProcFileReaders(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) procFile {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return newProcFile(p)
	}
	if st, err := file("s1", "123456 789 42\n").schedstat(); err != nil || st != (Schedstat{Run: 123456, Delay: 789, Runs: 42}) {
		t.Errorf("schedstat: %+v %v, want 123456 789 42", st, err)
	}
	for i, bad := range []string{"", "1 2", "1 x 3", "1 -2 3", "99999999999999999999 1 1"} {
		if st, err := file("bad"+strconv.Itoa(i), bad).schedstat(); err == nil {
			t.Errorf("schedstat %q: %+v, want an error", bad, st)
		}
	}
	if _, err := ReadSchedstat(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing schedstat: %v, want fs.ErrNotExist", err)
	}
	v2 := "usage_usec 10\nuser_usec 5\nsystem_usec 5\nnr_periods 4\nnr_throttled 2\nthrottled_usec 3000\n"
	if ns := readThrottled(file("v2", v2)); ns != 3_000_000 {
		t.Errorf("v2 cpu.stat: %d ns, want 3e6", ns)
	}
	if ns := readThrottled(file("v1", "nr_periods 4\nnr_throttled 2\nthrottled_time 777\n")); ns != 777 {
		t.Errorf("v1 cpu.stat: %d ns, want 777", ns)
	}
	if ns := readThrottled(file("none", "usage_usec 10\n")); ns != 0 {
		t.Errorf("cpu.stat without throttling: %d ns, want 0", ns)
	}
}

// A sample on the wait path allocates nothing: it runs every few ms on
// every waiting thread.
func TestProcFileReadersDoNotAllocate(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stat := newProcFile("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/schedstat")
	if _, err := stat.schedstat(); err != nil {
		t.Skip("no schedstat for this thread: a kernel without CONFIG_SCHED_INFO")
	}
	if n := testing.AllocsPerRun(100, func() { stat.schedstat() }); n != 0 {
		t.Errorf("schedstat: %v allocations per call, want 0", n)
	}
	p := filepath.Join(t.TempDir(), "cpu.stat")
	if err := os.WriteFile(p, []byte("nr_periods 4\nnr_throttled 2\nthrottled_usec 3000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cpuStat := newProcFile(p)
	if n := testing.AllocsPerRun(100, func() { readThrottled(cpuStat) }); n != 0 {
		t.Errorf("readThrottled: %v allocations per call, want 0", n)
	}
}
