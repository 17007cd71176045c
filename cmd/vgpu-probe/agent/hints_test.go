package agent

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

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
		cmd.SetArgs([]string{"hints-args", "--dir", dir, "vm 1"})
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
