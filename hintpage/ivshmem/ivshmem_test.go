package ivshmem

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// fakeDevice makes a PCI device directory under root with a BAR2 of
// barSize bytes (a hint page of two vCPU slots when large enough).
func fakeDevice(t *testing.T, root, bdf, vendor, device string, barSize int) (dir string, w *hintpage.Writer) {
	t.Helper()
	dir = filepath.Join(root, bdf)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"vendor": vendor + "\n", "device": device + "\n", "enable": "0\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := filepath.Join(dir, "resource2")
	if barSize < hintpage.Size(2) {
		if err := os.WriteFile(res, make([]byte, barSize), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir, nil
	}
	w, err := hintpage.OpenShared(res, 2, hintpage.FlagVCPU, os.Getuid(), os.Getgid(), barSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return dir, w
}

// fakeSys is a PCI device tree with one device that is not ours.
func fakeSys(t *testing.T) string {
	root := filepath.Join(t.TempDir(), "devices")
	fakeDevice(t, root, "0000:00:03.0", "0x1af4", "0x1000", 4096) // virtio-net: not ours
	return root
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root (CI runs the tests as root)")
	}
}

// TestExposeReadOnly: the page at out is the BAR itself (a publish after
// the mount is visible without a copy), 0644, read-only even to root, and
// gone with the original mode restored by Undo.
func TestExposeReadOnly(t *testing.T) {
	needRoot(t)
	root := fakeSys(t)
	dir, w := fakeDevice(t, root, "0000:00:05.0", "0x1af4", "0x1110", 1<<20)
	out := filepath.Join(t.TempDir(), "vgpu-probe-hints")
	e, err := Expose(root, "", out)
	if err != nil {
		t.Fatal(err)
	}
	if !mounted(out, filepath.Join(dir, "resource2")) {
		t.Fatalf("%s is not %s, mounted read-only", out, filepath.Join(dir, "resource2"))
	}
	if e.Device() != "0000:00:05.0" {
		t.Errorf("device %q, want 0000:00:05.0", e.Device())
	}

	if b, _ := os.ReadFile(filepath.Join(dir, "enable")); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("enable = %q, want 1", b)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v (%v), want 0644", out, fi.Mode(), err)
	}
	if f, err := os.OpenFile(out, os.O_WRONLY, 0); !errors.Is(err, unix.EROFS) {
		t.Errorf("opening %s for writing: %v, want EROFS", out, err)
		if f != nil {
			f.Close()
		}
	}
	f, err := hintpage.Map(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w.Publish(1, &hintpage.Slot{SwitchInNs: 5, PublishNs: 7, State: hintpage.StateRunning})
	var s hintpage.Slot
	if err := f.ReadSlot(1, &s); err != nil || s.SwitchInNs != 5 {
		t.Errorf("slot 1 through %s: %+v, %v; want the publish made after the mount", out, s, err)
	}

	if got := PageState(out); got != "hint page with 2 slots" {
		t.Errorf("page state %q", got)
	}
	if err := e.Undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", out, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "resource2")); fi.Mode().Perm() != 0o600 {
		t.Errorf("resource2 mode %v after Undo, want 0600 back", fi.Mode())
	}
}

// TestExposeTwice: an exposure left in place (guest --once) is found
// exposed already by the next.
func TestExposeTwice(t *testing.T) {
	needRoot(t)
	root := fakeSys(t)
	dir, _ := fakeDevice(t, root, "0000:00:05.0", "0x1af4", "0x1110", 8192)
	out := filepath.Join(t.TempDir(), "hints")
	t.Cleanup(func() { unix.Unmount(out, unix.MNT_DETACH) })
	for i := 0; i < 2; i++ {
		if _, err := Expose(root, "00:05.0", out); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if !sameFile(out, filepath.Join(dir, "resource2")) {
			t.Fatalf("run %d: %s is not the BAR", i, out)
		}
	}
}

func TestErrors(t *testing.T) {
	root := fakeSys(t)
	out := filepath.Join(t.TempDir(), "hints")
	if _, err := Expose(root, "", out); !errors.Is(err, ErrNoDevice) {
		t.Errorf("no device: %v", err)
	}
	for dev, want := range map[string]error{"5": ErrBadAddress, "0000:00:03.0": ErrNotIvshmem, "0000:00:09.0": ErrNoSuchDevice} {
		if _, err := Expose(root, dev, out); !errors.Is(err, want) || !strings.Contains(err.Error(), dev) {
			t.Errorf("device %s: %v, want %v naming the device", dev, err, want)
		}
	}
	fakeDevice(t, root, "0000:00:06.0", "0x1af4", "0x1110", 100)
	if _, err := Expose(root, "", out); err == nil || !strings.Contains(err.Error(), "a hint page needs at least") {
		t.Errorf("small BAR: %v", err)
	}
}

// TestFindPrefersPage: of two ivshmem devices, the one holding a page.
func TestFindPrefersPage(t *testing.T) {
	root := fakeSys(t)
	empty, _ := fakeDevice(t, root, "0000:00:04.0", "0x1af4", "0x1110", 4096)
	if err := os.WriteFile(filepath.Join(empty, "resource2"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, _ := fakeDevice(t, root, "0000:00:07.0", "0x1af4", "0x1110", 8192)
	got, err := deviceDir(root, "")
	if err != nil || got != dir {
		t.Errorf("found %q, %v; want %s", got, err, dir)
	}
}

// mounted reports whether out is res mounted read-only.
func mounted(out, res string) bool {
	var fs unix.Statfs_t
	return sameFile(out, res) && unix.Statfs(out, &fs) == nil && fs.Flags&unix.ST_RDONLY != 0
}

func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
