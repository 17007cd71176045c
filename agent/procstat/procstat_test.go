package procstat

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

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

// Status names this thread's process and owner.
func TestStatusOwnThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st, err := Status(unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if st.TGID != os.Getpid() || st.UIDs[0] != uint64(os.Getuid()) || st.GIDs[0] != uint64(os.Getgid()) {
		t.Fatalf("Status(own tid): tgid %d uid %d gid %d; want %d %d %d", st.TGID, st.UIDs[0], st.GIDs[0], os.Getpid(), os.Getuid(), os.Getgid())
	}
	if _, err := Status(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Status(no such thread): err %v, want not exist", err)
	}
}
