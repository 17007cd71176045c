// Package suitetest makes the files that the apps suite's and advise's
// tests run programs with: a stand-in for the launcher, and plain files
// where the parts are looked for.
package suitetest

import (
	"os"
	"path/filepath"
	"testing"
)

// File makes a file (and its folders) with mode and returns its path.
func File(t testing.TB, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// Launcher writes a stand-in for the launcher at dir/bin/name, beside
// dir/lib/libhybridsync.so (an empty file), and returns the library's
// path: it records what OpenMP wait variables it was given, sets
// GOMP_SPINCOUNT as the real one does, and runs the command.
func Launcher(t testing.TB, dir, name string) (lib string) {
	t.Helper()
	for _, d := range []string{"bin", "lib"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lib = filepath.Join(dir, "lib", "libhybridsync.so")
	script := `#!/bin/sh
FAKE_LAUNCHER_SAW="${OMP_WAIT_POLICY-}${GOMP_SPINCOUNT-}${KMP_BLOCKTIME-}"
FAKE_LAUNCHER=1
GOMP_SPINCOUNT=1000
export FAKE_LAUNCHER FAKE_LAUNCHER_SAW GOMP_SPINCOUNT
exec "$@"
`
	if err := os.WriteFile(filepath.Join(dir, "bin", name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return lib
}
