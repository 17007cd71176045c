package main

// `make install` as an operator or a package build runs it: staged under
// DESTDIR with PREFIX=/usr, every file in place with its mode, the man
// pages and completions generated from this binary's commands, the unit
// pointing at the installed binary, and `make uninstall` removing it all.

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// installed runs make install into a fresh DESTDIR and returns it, with
// the repository root and the make arguments (for uninstall).
func installed(t *testing.T) (dest, root string, args []string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed (.ci/run installs it)")
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root = filepath.Dir(strings.TrimSpace(string(out)))
	tmp := t.TempDir()
	dest = filepath.Join(tmp, "dest")
	args = []string{"-s", "DESTDIR=" + dest, "PREFIX=/usr", "BUILD=" + filepath.Join(tmp, "build"), "BIN=" + filepath.Join(tmp, "vgpu-probe")}
	mk := exec.Command("make", append([]string{"install"}, args...)...)
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	return dest, root, args
}

// pages returns the man page names of cmd and its visible subcommands, as
// cobra/doc names them (vgpu-probe-agent.1).
func pages(cmd *cobra.Command) []string {
	p := []string{strings.ReplaceAll(cmd.CommandPath(), " ", "-") + ".1"}
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && !c.IsAdditionalHelpTopicCommand() {
			p = append(p, pages(c)...)
		}
	}
	return p
}

func TestMakeInstall(t *testing.T) {
	dest, root, args := installed(t)
	usr := filepath.Join(dest, "usr")
	files := map[string]fs.FileMode{
		"bin/vgpu-probe":                                     0o755,
		"bin/hybridsync-run":                                 0o755,
		"bin/hybridsync-openmp":                              0o755,
		"lib/systemd/system/vgpu-probe-agent.service":        0o644,
		"share/bash-completion/completions/vgpu-probe":       0o644,
		"share/zsh/site-functions/_vgpu-probe":               0o644,
		"share/fish/vendor_completions.d/vgpu-probe.fish":    0o644,
		"share/man/man3/libhybridsync.3":                     0o644,
		"share/man/man1/hybridsync-run.1":                    0o644,
		"lib/libhybridsync.so.0.1.0":                         0o755,
		"lib/vgpu-probe/blocksync.so":                        0o755,
		"lib/libhybridsync.a":                                0o644,
		"include/hybridsync.h":                               0o644,
		"lib/pkgconfig/hybridsync.pc":                        0o644,
		"lib/cmake/hybridsync/hybridsyncConfig.cmake":        0o644,
		"lib/cmake/hybridsync/hybridsyncConfigVersion.cmake": 0o644,
		"share/modulefiles/hybridsync/0.1.0":                 0o644,
	}
	tree := newRootCmd()
	tree.InitDefaultCompletionCmd()
	for _, p := range pages(tree) {
		files["share/man/man1/"+p] = 0o644
	}
	for f, mode := range files {
		fi, err := os.Lstat(filepath.Join(usr, f))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode || fi.Size() == 0 {
			t.Errorf("/usr/%s: %v, %d bytes; want a non-empty file, mode %v", f, fi.Mode(), fi.Size(), mode)
		}
	}
	for link, want := range map[string]string{"lib/libhybridsync.so": "libhybridsync.so.0", "lib/libhybridsync.so.0": "libhybridsync.so.0.1.0"} {
		if got, err := os.Readlink(filepath.Join(usr, link)); err != nil || got != want {
			t.Errorf("/usr/%s -> %q (%v), want -> %s", link, got, err, want)
		}
	}
	checkNoStray(t, dest, files)
	checkUnit(t, filepath.Join(usr, "lib/systemd/system/vgpu-probe-agent.service"))
	checkManPages(t, usr)
	checkCompletions(t, usr)

	mk := exec.Command("make", append([]string{"uninstall"}, args...)...)
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make uninstall: %v\n%s", err, out)
	}
	filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("left after make uninstall: %s", strings.TrimPrefix(path, dest))
		}
		return err
	})
}

// checkNoStray: nothing is installed that the test does not know of (a
// new file needs a line above, and one in make uninstall), and no
// installed text names the staging directory.
func checkNoStray(t *testing.T, dest string, files map[string]fs.FileMode) {
	t.Helper()
	filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		rel := strings.TrimPrefix(path, filepath.Join(dest, "usr")+"/")
		if _, ok := files[rel]; !ok {
			t.Errorf("installed but not expected: /usr/%s", rel)
		}
		if b, err := os.ReadFile(path); err == nil && !strings.HasPrefix(rel, "bin/") && !strings.HasPrefix(rel, "lib/libhybridsync.") && bytes.Contains(b, []byte(dest)) {
			t.Errorf("/usr/%s names the staging directory %s", rel, dest)
		}
		return nil
	})
}

// checkUnit: the installed unit starts the installed binary.
func checkUnit(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindSubmatch(b)
	if m == nil || !strings.HasPrefix(string(m[1]), "/usr/bin/vgpu-probe agent") {
		t.Errorf("unit's ExecStart: %q, want /usr/bin/vgpu-probe agent ...", m)
	}
}

// checkManPages: each page is roff with a .TH line, and formats without a
// warning where groff is installed (.ci/setup-install.sh installs it).
func checkManPages(t *testing.T, usr string) {
	t.Helper()
	all, _ := filepath.Glob(filepath.Join(usr, "share/man/man*/*"))
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Logf("groff not installed: man pages checked for .TH only")
	}
	for _, p := range all {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^\.TH "?[A-Z-]+"? "?[1-8]"? `).Match(b) {
			t.Errorf("%s: no .TH line", filepath.Base(p))
		}
		if groff == "" {
			continue
		}
		var out, errb bytes.Buffer
		cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-P-cbou", p)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil || errb.Len() > 0 || !strings.Contains(out.String(), "NAME") {
			t.Errorf("groff -man %s: %v\n%s", filepath.Base(p), err, errb.String())
		}
	}
}

// checkCompletions: the bash script, sourced in bash (after the
// bash-completion package's helpers where installed), completes "ag" to
// the agent command by asking the installed binary; the zsh and fish ones
// are theirs, and parse where those shells are installed.
func checkCompletions(t *testing.T, usr string) {
	t.Helper()
	bin := filepath.Join(usr, "bin/vgpu-probe")
	script := `[ -f /usr/share/bash-completion/bash_completion ] && . /usr/share/bash-completion/bash_completion
. "$1" || exit 1
declare -F _get_comp_words_by_ref >/dev/null || { complete -p vgpu-probe; exit; }
COMP_WORDS=("$2" ag); COMP_CWORD=1; COMP_LINE="$2 ag"; COMP_POINT=${#COMP_LINE}
__start_vgpu-probe 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"`
	out, err := exec.Command("bash", "-c", script, "bash", filepath.Join(usr, "share/bash-completion/completions/vgpu-probe"), bin).CombinedOutput()
	switch {
	case err != nil:
		t.Errorf("sourcing the bash completion: %v\n%s", err, out)
	case strings.HasPrefix(string(out), "complete "):
		t.Logf("bash-completion not installed: the bash script sourced, not run (%s)", strings.TrimSpace(string(out)))
	case strings.TrimSpace(string(out)) != "agent":
		t.Errorf("bash completion of %q: %q, want agent", "vgpu-probe ag", out)
	}
	for shell, f := range map[string]string{"zsh": "share/zsh/site-functions/_vgpu-probe", "fish": "share/fish/vendor_completions.d/vgpu-probe.fish"} {
		b, err := os.ReadFile(filepath.Join(usr, f))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"zsh": "#compdef vgpu-probe", "fish": "complete -c vgpu-probe"}[shell]; !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s completion lacks %q", shell, want)
		}
		if _, err := exec.LookPath(shell); err == nil {
			if out, err := exec.Command(shell, "-n", filepath.Join(usr, f)).CombinedOutput(); err != nil {
				t.Errorf("%s -n %s: %v\n%s", shell, f, err, out)
			}
		}
	}
}
