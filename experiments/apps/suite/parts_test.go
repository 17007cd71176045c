package suite

import (
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite/suitetest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The parts are found where make puts them beside the binary, and where
// make install puts them under the prefix (a multiarch LIBDIR too),
// through a link to the binary; what is missing says how to build it, and
// the launcher is only noted.
func TestFindParts(t *testing.T) {
	tree := t.TempDir()
	exe := suitetest.File(t, filepath.Join(tree, "vgpu-probe"), 0o755)
	if _, _, err := FindParts(Parts{}, exe); err == nil || !strings.Contains(err.Error(), "run make in the source tree") ||
		!strings.Contains(err.Error(), filepath.Join(tree, "build", "lib", "libhybridsync.so")) || !strings.Contains(err.Error(), "--lib") {
		t.Errorf("no library: %v", err)
	}
	lib := suitetest.File(t, filepath.Join(tree, "build", "lib", "libhybridsync.so"), 0o755)
	if _, _, err := FindParts(Parts{}, exe); err == nil || !strings.Contains(err.Error(), "blocksync.c") || !strings.Contains(err.Error(), "--blocksync") {
		t.Errorf("no shim: %v", err)
	}
	shim := suitetest.File(t, filepath.Join(tree, "build", BlocksyncPath), 0o755)
	p, notes, err := FindParts(Parts{}, exe)
	if err != nil || p.Lib != lib || p.Blocksync != shim || p.Launcher != "" || len(notes) != 1 || !strings.Contains(notes[0], "hybridsync-run is left out") {
		t.Errorf("no launcher: %+v %q %v", p, notes, err)
	}
	run := suitetest.File(t, filepath.Join(tree, "build", "bin", LauncherName), 0o755)
	if p, notes, err = FindParts(Parts{}, exe); err != nil || p.Launcher != run || len(notes) != 0 {
		t.Errorf("build tree: %+v %q %v", p, notes, err)
	}

	prefix := t.TempDir()
	installed := suitetest.File(t, filepath.Join(prefix, "bin", "vgpu-probe"), 0o755)
	lib = suitetest.File(t, filepath.Join(prefix, "lib", "x86_64-linux-gnu", "libhybridsync.so"), 0o755)
	shim = suitetest.File(t, filepath.Join(prefix, "lib", "x86_64-linux-gnu", "vgpu-probe", "blocksync.so"), 0o755)
	run = suitetest.File(t, filepath.Join(prefix, "bin", LauncherName), 0o755)
	link := filepath.Join(t.TempDir(), "vgpu-probe")
	if err := os.Symlink(installed, link); err != nil {
		t.Fatal(err)
	}
	if p, _, err = FindParts(Parts{}, link); err != nil || p.Lib != lib || p.Blocksync != shim || p.Launcher != run {
		t.Errorf("installed, through a link: %+v %v", p, err)
	}

	given := Parts{Lib: filepath.Join(prefix, "nope.so")}
	if _, _, err := FindParts(given, installed); err == nil || !strings.Contains(err.Error(), "--lib "+given.Lib+": not a file") {
		t.Errorf("--lib missing: %v", err)
	}
	given = Parts{Launcher: suitetest.File(t, filepath.Join(prefix, "noexec"), 0o644)}
	if _, _, err := FindParts(given, installed); err == nil || !strings.Contains(err.Error(), "--launcher") {
		t.Errorf("--launcher not executable: %v", err)
	}
}

// Built (apps) fills what make built beside the binary and leaves empty
// what is not there, without an error; what was given stays.
func TestBuilt(t *testing.T) {
	tree := t.TempDir()
	exe := suitetest.File(t, filepath.Join(tree, "vgpu-probe"), 0o755)
	if p := Built(Parts{}, exe); p != (Parts{}) {
		t.Errorf("nothing built: %+v", p)
	}
	shim := suitetest.File(t, filepath.Join(tree, "build", BlocksyncPath), 0o755)
	if p := Built(Parts{}, exe); p != (Parts{Blocksync: shim}) {
		t.Errorf("the shim only: %+v", p)
	}
	lib := suitetest.File(t, filepath.Join(tree, "build", "lib", "libhybridsync.so"), 0o755)
	run := suitetest.File(t, filepath.Join(tree, "build", "bin", LauncherName), 0o755)
	if p := Built(Parts{}, exe); p != (Parts{Lib: lib, Blocksync: shim, Launcher: run}) {
		t.Errorf("make's parts: %+v", p)
	}
	given := Parts{Lib: "/opt/x/lib/libhybridsync.so", Blocksync: "/opt/shim.so"}
	if p := Built(given, exe); p.Lib != given.Lib || p.Blocksync != given.Blocksync || p.Launcher != run {
		t.Errorf("given kept, the launcher found: %+v", p)
	}
}
