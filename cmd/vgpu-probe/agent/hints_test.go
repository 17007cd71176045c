package agent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// hints-args quotes what a shell would split or expand: a --dir with a
// space, a quote and a dollar sign comes back from the shell as the
// arguments hintpage.QEMUArgs makes, and a plain one is printed as it is.
func TestHintsArgsQuoted(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to read the line back")
	}
	for _, dir := range []string{"/dev/shm", "/run/a b'c", "/run/x$HOME`id`", "/run/a,b\"c\\d", "/run/''"} {
		cmd := NewCmd(nil)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"hints-args", "--no-page", "--dir", dir, "vm 1"})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("--dir %q: %v", dir, err)
		}
		line := strings.TrimSuffix(out.String(), "\n")
		b, err := exec.Command(sh, "-c", `eval "set -- $1"; printf '%s\0' "$@"`, "sh", line).Output()
		if err != nil {
			t.Fatalf("sh reading %q: %v", line, err)
		}
		got := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if want := hintpage.QEMUArgs(dir, "vm 1"); !slices.Equal(got, want) {
			t.Errorf("--dir %q: the shell reads %q back as %q, want %q", dir, line, got, want)
		}
		if dir == "/dev/shm" && strings.Contains(line, "'") {
			t.Errorf("--dir %q: %q is quoted, want it as it is", dir, line)
		}
	}
}

// hints-args makes the page before it prints the arguments: mode 0600,
// owned by --owner, 1 MiB; a --dir that another user may write (like
// /dev/shm) or that is a symlink is refused with one line, and nothing is
// made there.
func TestHintsArgsMakesPage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("hints-args makes pages as root")
	}
	run := func(args ...string) error {
		cmd := NewCmd(nil)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append([]string{"hints-args"}, args...))
		return cmd.Execute()
	}
	dir := t.TempDir()
	if err := run("--dir", dir, "--owner", "65534:65533", "vm 1"); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dir, hintpage.FileName("vm 1")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o600 || st.Uid != 65534 || st.Gid != 65533 || st.Size != hintpage.ShmemSizeMiB<<20 {
		t.Errorf("page: mode %#o owner %d:%d size %d; want 0600 65534:65533 %d MiB", st.Mode&0o7777, st.Uid, st.Gid, st.Size, hintpage.ShmemSizeMiB)
	}
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{shared, link} {
		err := run("--dir", d, "vm")
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("--dir %s: %v, want a one-line refusal", d, err)
		}
	}
	if es, _ := os.ReadDir(shared); len(es) != 0 {
		t.Errorf("a page made in a directory others may write: %v", es)
	}
	if err := run("--owner", "no-such-user-x", "vm"); !errors.Is(err, usage.ErrBadInput) {
		t.Errorf("--owner of no user: %v, want bad input", err)
	}
}
