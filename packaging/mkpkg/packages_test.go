package main

// The packages as operators use them: `make package` builds both; the
// .deb installs with dpkg, its agent, launcher and library work from the
// installed paths (pkg-config and CMake find the library unaided), its
// unit passes systemd-analyze verify and is enabled, and dpkg -r leaves
// nothing of it but its configuration; the .rpm holds the same files,
// and rpm installs, verifies and erases it under a root of its own.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const unitName = "vgpu-probe-agent.service"

// repoRoot is the module's directory (two above this package's).
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// built runs make package into a fresh directory and returns the .deb,
// the .rpm and the VERSION file's version.
func built(t *testing.T) (deb, rpm, version string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed (.ci/run installs it)")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "pkg")
	mk := exec.Command("make", "-s", "package", "BUILD="+filepath.Join(dir, "build"), "BIN="+filepath.Join(dir, "vgpu-probe"), "PKG_OUT="+out)
	mk.Dir = root
	if b, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make package: %v\n%s", err, b)
	}
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version = strings.TrimSpace(string(v))
	debs, _ := filepath.Glob(filepath.Join(out, "*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(out, "*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package wrote %v %v, want one .deb and one .rpm", debs, rpms)
	}
	return debs[0], rpms[0], version
}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// debFiles lists the .deb's files and links (not directories), from
// dpkg-deb -c's tar listing.
func debFiles(t *testing.T, deb string) []string {
	var files []string
	for _, l := range strings.Split(output(t, "dpkg-deb", "-c", deb), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		files = append(files, strings.TrimPrefix(f[5], "."))
	}
	slices.Sort(files)
	return files
}

// rpmFiles lists the .rpm's files and links (not directories).
func rpmFiles(t *testing.T, rpm string) []string {
	var files []string
	for _, l := range strings.Split(strings.TrimSpace(output(t, "rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\\n]", rpm)), "\n") {
		perms, name, _ := strings.Cut(l, " ")
		if !strings.HasPrefix(perms, "d") {
			files = append(files, name)
		}
	}
	slices.Sort(files)
	return files
}

func TestPackages(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "rpm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (.ci/setup-packaging.sh installs it)", tool)
		}
	}
	deb, rpm, version := built(t)

	t.Run("version", func(t *testing.T) {
		if got := strings.TrimSpace(output(t, "dpkg-deb", "-f", deb, "Version")); got != version+"-1" {
			t.Errorf(".deb version %q, want %s-1 (VERSION)", got, version)
		}
		if got := output(t, "rpm", "-qp", "--qf", "%{VERSION}-%{RELEASE}", rpm); got != version+"-1" {
			t.Errorf(".rpm version %q, want %s-1 (VERSION)", got, version)
		}
	})

	// The same files, the library's directory each distribution's.
	t.Run("same files", func(t *testing.T) {
		d, r := debFiles(t, deb), rpmFiles(t, rpm)
		multiarch := regexp.MustCompile(`^/usr/lib/[a-z0-9_]+-linux-gnu/`)
		var mapped []string
		for _, f := range d {
			mapped = append(mapped, multiarch.ReplaceAllString(f, "/usr/lib64/"))
		}
		slices.Sort(mapped)
		if !slices.Equal(mapped, r) {
			t.Errorf("the .deb's files (multiarch as lib64):\n%s\nthe .rpm's:\n%s", strings.Join(mapped, "\n"), strings.Join(r, "\n"))
		}
		for _, want := range []string{"/usr/bin/vgpu-probe", "/usr/bin/hybridsync-run", "/usr/bin/hybridsync-openmp",
			"/usr/lib/systemd/system/" + unitName, "/usr/include/hybridsync.h", "/usr/lib64/libhybridsync.so.0",
			"/usr/lib64/vgpu-probe/blocksync.so", "/usr/lib64/pkgconfig/hybridsync.pc",
			"/usr/lib64/cmake/hybridsync/hybridsyncConfig.cmake", "/usr/share/man/man1/vgpu-probe-agent.1",
			"/usr/share/bash-completion/completions/vgpu-probe"} {
			if !slices.Contains(r, want) {
				t.Errorf("the .rpm has no %s", want)
			}
		}
	})

	// No maintainer script starts, stops or restarts the agent.
	t.Run("scripts leave the agent alone", func(t *testing.T) {
		scripts := output(t, "rpm", "-qp", "--scripts", rpm)
		dir := t.TempDir()
		output(t, "dpkg-deb", "-e", deb, dir)
		for _, s := range []string{"postinst", "postrm", "preinst", "prerm"} {
			if b, err := os.ReadFile(filepath.Join(dir, s)); err == nil {
				scripts += string(b)
			}
		}
		// Comments say what the scripts do not do, and messages tell
		// the administrator what to run.
		scripts = regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(scripts, "")
		scripts = regexp.MustCompile(`"[^"\n]*"`).ReplaceAllString(scripts, `""`)
		re := regexp.MustCompile(`systemctl[^\n]*\b(start|stop|restart|try-restart|reload-or-restart|kill)\b|--now|deb-systemd-invoke`)
		if m := re.FindString(scripts); m != "" {
			t.Errorf("a maintainer script runs %q", m)
		}
		if !strings.Contains(scripts, "enable") {
			t.Error("no maintainer script enables the unit")
		}
	})

	// rpm itself installs, verifies and erases the .rpm under a root of
	// its own (no Red Hat system here: without its dependencies and
	// scripts, which need glibc's package and systemd).
	t.Run("rpm", func(t *testing.T) {
		root := t.TempDir()
		output(t, "rpm", "--root", root, "--initdb")
		output(t, "rpm", "--root", root, "-i", "--nodeps", "--noscripts", rpm)
		for _, f := range rpmFiles(t, rpm) {
			if _, err := os.Lstat(filepath.Join(root, f)); err != nil {
				t.Errorf("rpm -i: %v", err)
			}
		}
		if b, err := exec.Command("rpm", "--root", root, "-V", "--nodeps", "vgpu-probe").CombinedOutput(); err != nil {
			t.Errorf("rpm -V (each file's digest, mode and owner as the package says): %v\n%s", err, b)
		}
		output(t, "rpm", "--root", root, "-e", "--nodeps", "--noscripts", "vgpu-probe")
		filepath.WalkDir(filepath.Join(root, "usr"), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				t.Errorf("left after rpm -e: %s", strings.TrimPrefix(path, root))
			}
			return err
		})
	})

	t.Run("dpkg", func(t *testing.T) { dpkgInstallRemove(t, deb, version) })
}

// dpkgInstallRemove installs the .deb on this machine, uses it, removes
// it and purges it.
func dpkgInstallRemove(t *testing.T, deb, version string) {
	if os.Geteuid() != 0 {
		t.Skip("dpkg -i needs root (.ci/run runs the tests as root)")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("dpkg not installed: not a Debian machine")
	}
	if err := exec.Command("dpkg-query", "-W", "vgpu-probe").Run(); err == nil {
		t.Skip("a vgpu-probe package is already installed here: not replacing it")
	}
	for _, f := range []string{"/usr/bin/vgpu-probe", "/usr/bin/hybridsync-run"} {
		if _, err := os.Lstat(f); err == nil {
			t.Skipf("%s exists, not from a package: not overwriting it", f)
		}
	}
	t.Cleanup(func() { exec.Command("dpkg", "-P", "vgpu-probe").Run() })
	output(t, "dpkg", "-i", deb)
	files := strings.Fields(output(t, "dpkg-query", "-L", "vgpu-probe"))

	// Enabled (the link in multi-user.target.wants), not started.
	link := "/etc/systemd/system/multi-user.target.wants/" + unitName
	if target, err := os.Readlink(link); err != nil || filepath.Base(target) != unitName {
		t.Errorf("unit not enabled: %s -> %q (%v)", link, target, err)
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Error("systemd-analyze not installed (.ci/setup-packaging.sh installs systemd): the installed unit is not verified")
	} else if b, err := exec.Command("systemd-analyze", "verify", "/usr/lib/systemd/system/"+unitName).CombinedOutput(); err != nil || len(bytes.TrimSpace(b)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitName, err, b)
	}
	if got := output(t, "/usr/bin/vgpu-probe", "--version"); !strings.Contains(got, "version "+version) {
		t.Errorf("vgpu-probe --version: %q, want %s", got, version)
	}
	// The agent from the installed paths, watching a real process.
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	pid := target.Process.Pid
	if got := output(t, "/usr/bin/vgpu-probe", "agent", "--pid", strconv.Itoa(pid), "--once", "2s"); !regexp.MustCompile(`(?m)^\s*` + strconv.Itoa(pid) + `\s+pid\s`).MatchString(got) {
		t.Errorf("vgpu-probe agent --pid %d --once 2s printed no row for it:\n%s", pid, got)
	}
	output(t, "/usr/bin/hybridsync-run", "true")
	if got := output(t, "ldconfig", "-p"); !strings.Contains(got, "libhybridsync.so.0 ") {
		t.Error("ldconfig's cache has no libhybridsync.so.0 after install")
	}
	if _, err := exec.LookPath("pkg-config"); err == nil {
		if got := output(t, "pkg-config", "--libs", "hybridsync"); !strings.Contains(got, "-lhybridsync") {
			t.Errorf("pkg-config --libs hybridsync: %q", got)
		}
	}
	// A CMake project finds the packaged library in the distribution's
	// directory with no variable set.
	if _, err := exec.LookPath("cmake"); err == nil {
		bdir := t.TempDir()
		output(t, "cmake", "-S", filepath.Join(repoRoot(t), "libhybridsync", "testdata", "cmake"), "-B", bdir)
		output(t, "cmake", "--build", bdir, "--target", "consumer")
	}

	output(t, "dpkg", "-r", "vgpu-probe")
	for _, f := range files {
		if fi, err := os.Lstat(f); err == nil && !fi.IsDir() {
			t.Errorf("left after dpkg -r: %s", f)
		}
	}
	if got := output(t, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "vgpu-probe"); strings.TrimSpace(got) != "rc" {
		t.Errorf("after dpkg -r the package is %q, want rc (removed, configuration kept)", got)
	}
	output(t, "dpkg", "-P", "vgpu-probe")
	for _, f := range []string{link, "/etc/systemd/system/" + unitName} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("left after dpkg -P: %s", f)
		}
	}
}
