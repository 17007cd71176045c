package procstat

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSchedstat(t *testing.T) {
	run, delay, n, err := ParseSchedstat([]byte("123456 789 42\n"))
	if err != nil || run != 123456 || delay != 789 || n != 42 {
		t.Fatalf("got %d %d %d %v", run, delay, n, err)
	}
	for _, bad := range []string{"", "1 2", "1 2 3 4", "1 x 3", "-1 2 3", "99999999999999999999 1 1"} {
		if _, _, _, err := ParseSchedstat([]byte(bad)); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: err %v, want ErrFormat", bad, err)
		}
	}
}

func TestParseStatus(t *testing.T) {
	b, err := os.ReadFile("testdata/status")
	if err != nil {
		t.Fatal(err)
	}
	v, iv, err := ParseStatus(b)
	if err != nil || v != 1203 || iv != 17 {
		t.Fatalf("got %d %d %v, want 1203 17", v, iv, err)
	}
	for _, bad := range []string{"", "Name:\tx\n", "voluntary_ctxt_switches:\t1\n", "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"} {
		if _, _, err := ParseStatus([]byte(bad)); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: err %v, want ErrFormat", bad, err)
		}
	}
}

// Read agrees with what this thread does: it runs, and sleeping adds
// voluntary switches.
func TestReadOwnThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	c0, err := Read(tid)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		time.Sleep(time.Millisecond)
	}
	for t0 := time.Now(); time.Since(t0) < 20*time.Millisecond; {
	}
	c1, err := Read(tid)
	if err != nil {
		t.Fatal(err)
	}
	d := c1.Sub(c0)
	if d.RunNs < uint64(10*time.Millisecond) || d.Voluntary < 20 || d.Timeslices < 20 {
		t.Fatalf("after 20 sleeps and a 20 ms spin: %+v", d)
	}
}

func TestReadMissingThread(t *testing.T) {
	if _, err := Read(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err %v, want not exist", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("1 2 3\n"))
	f.Add([]byte("voluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t6\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, _, err := ParseSchedstat(b); err != nil && !errors.Is(err, ErrFormat) {
			t.Fatalf("schedstat error without ErrFormat: %v", err)
		}
		if _, _, err := ParseStatus(b); err != nil && !errors.Is(err, ErrFormat) {
			t.Fatalf("status error without ErrFormat: %v", err)
		}
	})
}
