package hintpage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	// A page QEMU made itself (0644 under its umask) may be open in
	// another user's hands: refused, left as it is.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShared(path, 2, FlagVCPU, os.Getuid(), os.Getgid(), 64<<10); !errors.Is(err, ErrForeign) {
		t.Fatalf("OpenShared of a 0644 page: %v, want ErrForeign", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
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

// PrepareShared makes a VM's page before QEMU starts: 0600 and its
// owner's from the open on, 1 MiB as QEMU's size=1M asks; a page it (or
// the agent) made before is kept in place; a symlink, a FIFO, another
// user's file or one QEMU made (0644) is refused and left alone.
func TestPrepareShared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the page to another user")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "vgpu-probe-hints-vm")
	if err := PrepareShared(path, 4242, 4243, 1<<20); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o600 || st.Uid != 4242 || st.Gid != 4243 || st.Size != 1<<20 || st.Blocks == 0 {
		t.Fatalf("page: mode %#o owner %d:%d size %d blocks %d; want 0600 4242:4243, 1 MiB allocated", st.Mode&0o7777, st.Uid, st.Gid, st.Size, st.Blocks)
	}
	if err := PrepareShared(path, 4242, 4243, 1<<20); err != nil {
		t.Fatalf("again: %v", err)
	}
	var again syscall.Stat_t
	syscall.Lstat(path, &again)
	if again.Ino != st.Ino {
		t.Fatalf("page replaced: inode %d, was %d", again.Ino, st.Ino)
	}
	refused := map[string]func(p string) error{
		"symlink": func(p string) error { return os.Symlink(path, p) },
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"other user's": func(p string) error {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Chown(p, 4444, 4444)
		},
		"QEMU's 0644": func(p string) error {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o644)
		},
	}
	for name, plant := range refused {
		p := filepath.Join(dir, "vgpu-probe-hints-"+strings.ReplaceAll(name, " ", "_"))
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		var before syscall.Stat_t
		syscall.Lstat(p, &before)
		if err := PrepareShared(p, 4242, 4243, 1<<20); err == nil {
			t.Errorf("%s: taken as a page", name)
		}
		var after syscall.Stat_t
		syscall.Lstat(p, &after)
		if after != before {
			t.Errorf("%s: changed by a refusal", name)
		}
	}
}
