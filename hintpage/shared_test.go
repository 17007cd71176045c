package hintpage

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A page file that exists (QEMU's, or the page an earlier agent
// published, which a running QEMU maps) is taken over in place: the same
// inode, never shorter, a fresh header and slots that a mapping made
// before sees.
func TestOpenSharedInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vgpu-probe-hints-vm")
	w, err := OpenShared(path, 4, FlagVCPU, os.Getuid(), os.Getgid(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		w.Publish(i, &Slot{PublishNs: 111, Contention: ContShared, SliceNs: 3_000_000})
	}
	w.Close()
	// What QEMU holds: a mapping of the file, made before the restart.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	qemu, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(qemu)
	qemu[1<<19] = 0xAB // the guest's own bytes, past the page
	var before syscall.Stat_t
	syscall.Stat(path, &before)
	if err := os.Chmod(path, 0o644); err != nil { // as QEMU creates it
		t.Fatal(err)
	}

	w, err = OpenShared(path, 2, FlagVCPU, os.Getuid(), os.Getgid(), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var after syscall.Stat_t
	syscall.Stat(path, &after)
	if after.Ino != before.Ino || after.Size != 1<<20 || after.Mode&0o777 != 0o600 {
		t.Fatalf("inode %d size %d mode %o, want inode %d, 1 MiB kept, 0600", after.Ino, after.Size, after.Mode&0o777, before.Ino)
	}
	w.Publish(1, &Slot{PublishNs: uint64(time.Now().UnixNano()), Contention: ContFree, SliceNs: ^uint64(0)})
	pg, err := Parse(qemu)
	if err != nil {
		t.Fatal(err)
	}
	if h := pg.Header(); h.Slots != 2 {
		t.Fatalf("QEMU's mapping shows %d slots, want the new page's 2", h.Slots)
	}
	var s Slot
	if err := pg.ReadSlot(0, &s); !errors.Is(err, ErrAbsurd) || s.PublishNs != 0 {
		t.Errorf("slot 0 of the earlier page not cleared: %+v %v", s, err)
	}
	if err := pg.ReadSlot(1, &s); err != nil || s.Contention != ContFree {
		t.Errorf("slot 1 through QEMU's mapping: %+v %v", s, err)
	}
	if qemu[1<<19] != 0xAB {
		t.Error("bytes past the page changed")
	}
}

// What is at the path and is not a page the agent may publish into is
// refused, through the descriptor: a hard link, an oversized file, a
// FIFO (without blocking), a directory.
func TestOpenSharedRefuses(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(p("target"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p("target"), p("linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("big"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p("big"), MaxSharedSize+4096); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"linked", "big", "fifo", "dir"} {
		done := make(chan error, 1)
		go func() {
			_, err := OpenShared(p(name), 1, FlagVCPU, os.Getuid(), os.Getgid(), 1<<20)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: published into it", name)
			} else if name != "dir" && !errors.Is(err, ErrForeign) {
				t.Errorf("%s: %v, want ErrForeign", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: OpenShared blocked", name)
		}
	}
	if fi, _ := os.Stat(p("big")); fi.Size() != MaxSharedSize+4096 {
		t.Errorf("a refused file changed size: %d", fi.Size())
	}
}
