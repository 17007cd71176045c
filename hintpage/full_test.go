package hintpage

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/internal/tmpfstest"
)

// On a full filesystem a page is refused with ENOSPC and leaves nothing
// behind; the pages that fit take their memory at creation, so writing
// them never faults. A sparse page would be created and then kill the
// writer with SIGBUS at its first write.
func TestCreateOnFullFilesystem(t *testing.T) {
	dir := tmpfstest.Mount(t, 8<<10) // two 4 KiB pages
	var ws []*Writer
	for _, name := range []string{"a", "b", "c"} {
		w, err := Create(filepath.Join(dir, "vgpu-probe-hints-"+name), 2, 0, os.Getuid(), os.Getgid())
		if name == "c" {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("third page in 8 KiB: %v, want ENOSPC", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("page %s: %v", name, err)
		}
		ws = append(ws, w)
	}
	s := slotFor(3)
	for _, w := range ws {
		w.Publish(1, &s)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"vgpu-probe-hints-a", "vgpu-probe-hints-b"}) {
		t.Fatalf("directory holds %v, want the two pages only", got)
	}
	for _, w := range ws {
		if err := w.Remove(); err != nil {
			t.Fatal(err)
		}
	}
	if got := names(t, dir); len(got) != 0 {
		t.Fatalf("left behind: %v", got)
	}
}

// A shared page file that exists sparse (QEMU sized it with ftruncate)
// gets its memory when opened: on a filesystem without room for it,
// ENOSPC then, not SIGBUS later.
func TestOpenSharedSparseOnFullFilesystem(t *testing.T) {
	dir := tmpfstest.Mount(t, 8<<10)
	path := filepath.Join(dir, "vgpu-probe-hints-vm")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 10); err != nil { // sparse: takes no memory
		t.Fatal(err)
	}
	f.Close()
	if _, err := OpenShared(path, 2, FlagVCPU, os.Getuid(), os.Getgid(), 64<<10); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("OpenShared of a sparse 64 KiB file in 8 KiB: %v, want ENOSPC", err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
