// Package tmpfstest mounts small tmpfs filesystems for tests of what
// happens when a directory fills up or is read-only: a real filesystem,
// with the kernel's own ENOSPC and EROFS.
package tmpfstest

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size bytes (mode 1777, like /dev/shm) on a new
// directory and unmounts it when the test ends; opts are more mount
// options ("ro"). It skips the test, saying why, when not root.
func Mount(t testing.TB, size int, opts ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	data := fmt.Sprintf("size=%d,mode=1777", size)
	var flags uintptr
	for _, o := range opts {
		if o == "ro" {
			flags |= unix.MS_RDONLY
			continue
		}
		data += "," + o
	}
	if err := unix.Mount("vgpu-probe-test", dir, "tmpfs", flags, data); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file into dir until the filesystem is full, and returns
// its path: removing it makes room again.
func Fill(t testing.TB, dir string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "fill-*")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	return f.Name()
}
