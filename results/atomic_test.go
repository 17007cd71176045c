package results

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// A file written under sudo must stay readable by the user's group and
// others: 0644 less the umask, whatever mode the file it replaces had.
func TestWriteAtomicMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o644 {
		t.Errorf("mode %v, want -rw-r--r--", m)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("content %q, want %q", b, "new")
	}
	onlyFile(t, path)

	syscall.Umask(0o077)
	if err := WriteAtomic(path, []byte("newer")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("under umask 077: %v, %v, want -rw-------", fi.Mode(), err)
	}
}

// envFSizeChild makes the test binary the child of TestWriteAtomicFailed.
const envFSizeChild = "RESULTS_TEST_FSIZE_CHILD"

// A write that fails part way (here the file size limit, RLIMIT_FSIZE, as
// a full disk would) leaves the old file as it was and no temporary file.
// The limit is set in a child process: it would cut the test's own output.
func TestWriteAtomicFailed(t *testing.T) {
	if path := os.Getenv(envFSizeChild); path != "" {
		writeOverLimit(path)
		return
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriteAtomicFailed$")
	cmd.Env = append(os.Environ(), envFSizeChild+"="+path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("child: %v, want exit 3 (the write failed); output:\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("file too large")) {
		t.Errorf("child's error %q, want EFBIG", out)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "old" {
		t.Errorf("after the failed write: %q, %v, want the old content", b, err)
	}
	onlyFile(t, path)
}

// writeOverLimit writes 1 MiB to path under a 64 KiB file size limit and
// exits 3 with the error, or 0 if the write succeeded.
func writeOverLimit(path string) {
	lim := syscall.Rlimit{Cur: 64 << 10, Max: 64 << 10}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		os.Stderr.WriteString("setrlimit: " + err.Error() + "\n")
		os.Exit(1)
	}
	// The Go runtime ignores SIGXFSZ: the write returns EFBIG.
	if err := WriteAtomic(path, make([]byte, 1<<20)); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(3)
	}
	os.Exit(0)
}

// onlyFile fails unless path is the only entry of its directory: no
// temporary file was left behind.
func onlyFile(t *testing.T, path string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != filepath.Base(path) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only %s", names, filepath.Base(path))
	}
}
