package ctest

// The library as it is packaged: its SONAME and links, the CMake version
// check, and the documentation of every variable it reads.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// headerVersion reads HYBRIDSYNC_VERSION_MAJOR and _MINOR from the header.
func headerVersion(t *testing.T) (major, minor string) {
	t.Helper()
	root, _ := repoRoot()
	b, err := os.ReadFile(filepath.Join(root, "libhybridsync", "include", "hybridsync.h"))
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) string {
		m := regexp.MustCompile(`#define ` + name + ` (\d+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("hybridsync.h defines no %s", name)
		}
		return string(m[1])
	}
	return get("HYBRIDSYNC_VERSION_MAJOR"), get("HYBRIDSYNC_VERSION_MINOR")
}

func readelfDynamic(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("readelf", "-d", path).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf -d %s (binutils, installed with gcc): %v\n%s", path, err, out)
	}
	return string(out)
}

// TestSONAME: the installed library is libhybridsync.so.MAJOR.MINOR.PATCH
// with SONAME libhybridsync.so.MAJOR, the major of the header's version,
// reached through the .so.MAJOR and .so links; what links with
// -lhybridsync records the SONAME, so a library of another major is never
// loaded in its place.
func TestSONAME(t *testing.T) {
	need(t)
	major, minor := headerVersion(t)
	lib := filepath.Join(built.prefix, "lib")
	soname := "libhybridsync.so." + major
	for link, want := range map[string]string{"libhybridsync.so": soname, soname: ""} {
		got, err := os.Readlink(filepath.Join(lib, link))
		if err != nil {
			t.Fatalf("%s: %v, want a symbolic link", link, err)
		}
		if want != "" && got != want {
			t.Errorf("%s -> %s, want -> %s", link, got, want)
		}
		if link == soname && !strings.HasPrefix(got, soname+"."+minor+".") {
			t.Errorf("%s -> %s, want -> %s.%s.PATCH (the header's version)", link, got, soname, minor)
		}
	}
	real, err := filepath.EvalSymlinks(filepath.Join(lib, "libhybridsync.so"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(real); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("%s: %v %v, want a regular file, mode 0755", real, fi.Mode(), err)
	}
	if dyn := readelfDynamic(t, real); !strings.Contains(dyn, "Library soname: ["+soname+"]") {
		t.Errorf("%s has not SONAME %s:\n%s", real, soname, dyn)
	}
	if dyn := readelfDynamic(t, filepath.Join(built.dir, "hsapp_so")); !strings.Contains(dyn, "Shared library: ["+soname+"]") {
		t.Errorf("a program linked with -lhybridsync does not need %s:\n%s", soname, dyn)
	}
}

// TestCMakeVersion: find_package(hybridsync VERSION) accepts the installed
// version and older ones of the same major, and refuses newer ones and
// other majors (write_basic_package_version_file's SameMajorVersion).
func TestCMakeVersion(t *testing.T) {
	need(t)
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("cmake not installed (.ci/setup-libhybridsync.sh installs it)")
	}
	major, minor := headerVersion(t)
	root, _ := repoRoot()
	src := filepath.Join(root, "libhybridsync", "testdata", "cmake")
	configure := func(want string) (string, string, error) {
		bdir := t.TempDir()
		cmd := exec.Command("cmake", "-S", src, "-B", bdir, "-DCMAKE_PREFIX_PATH="+built.prefix, "-DHS_WANT_VERSION="+want)
		out, err := cmd.CombinedOutput()
		return bdir, string(out), err
	}
	cur := major + "." + minor
	for _, want := range []string{cur, cur + ".0", major, major + ".0", cur + "...<" + major + ".99"} {
		if _, out, err := configure(want); err != nil {
			t.Errorf("find_package(hybridsync %s): %v\n%s", want, err, out)
		}
	}
	newer := major + "." + incr(t, minor)
	for _, want := range []string{newer, incr(t, major) + ".0", newer + "...<" + major + ".99"} {
		_, out, err := configure(want)
		if err == nil || !strings.Contains(out, `compatible with requested version`) {
			t.Errorf("find_package(hybridsync %s) against %s: %v, want it refused\n%s", want, cur, err, out)
		}
	}
	// The imported target links the SONAME, as -lhybridsync does.
	bdir, out, err := configure(cur)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := sh(bdir, "cmake", "--build", bdir, "--target", "consumer"); err != nil {
		t.Fatal(err)
	}
	if dyn := readelfDynamic(t, filepath.Join(bdir, "consumer")); !strings.Contains(dyn, "Shared library: [libhybridsync.so."+major+"]") {
		t.Errorf("the CMake consumer does not need libhybridsync.so.%s:\n%s", major, dyn)
	}
}

// incr returns the decimal number n plus one.
func incr(t *testing.T, n string) string {
	t.Helper()
	i, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(i + 1)
}

var envLiteral = regexp.MustCompile(`"(HYBRIDSYNC_[A-Z0-9_]*[A-Z0-9])"`)

// envRead returns the HYBRIDSYNC_* variables the library's code names as
// string literals: getenv calls in C, the Env* constants in Go. Test
// files and programs (testdata) are not the library.
func envRead(t *testing.T, root string) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	for _, dir := range []string{"libhybridsync", "hybridsync"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			ext := filepath.Ext(path)
			if d.IsDir() || strings.HasSuffix(path, "_test.go") || (ext != ".go" && ext != ".c" && ext != ".h") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range envLiteral.FindAllSubmatch(b, -1) {
				vars[string(m[1])] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The scan itself must work: these two are read for certain.
	if !vars["HYBRIDSYNC_MODE"] || !vars["HYBRIDSYNC_CUDA_LIB"] {
		t.Fatalf("the source scan found %v: it misses variables the library reads", sorted(vars))
	}
	return vars
}

func sorted(set map[string]bool) []string {
	var s []string
	for k := range set {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// TestEnvironmentDocumented: every HYBRIDSYNC_* variable the library reads
// has a line in the header's table, a row in docs/libhybridsync.md's table
// and an entry in the man page, and none of them documents a variable the
// library does not read.
func TestEnvironmentDocumented(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := envRead(t, root)
	docs := []struct {
		file string
		row  *regexp.Regexp // what documents a variable there
	}{
		{"libhybridsync/include/hybridsync.h", regexp.MustCompile(`(?m)^ \*   (HYBRIDSYNC_[A-Z0-9_]+) `)},
		{"docs/libhybridsync.md", regexp.MustCompile("(?m)^\\| `(HYBRIDSYNC_[A-Z0-9_]+)` \\|")},
		{"libhybridsync/libhybridsync.3", regexp.MustCompile(`(?m)^\.TP\n\.B (HYBRIDSYNC_[A-Z0-9_]+)$`)},
	}
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(root, d.file))
		if err != nil {
			t.Fatal(err)
		}
		documented := map[string]bool{}
		for _, m := range d.row.FindAllSubmatch(b, -1) {
			documented[string(m[1])] = true
		}
		for _, v := range sorted(read) {
			if !documented[v] {
				t.Errorf("%s: %s is read by the library but not documented", d.file, v)
			}
		}
		for _, v := range sorted(documented) {
			if !read[v] {
				t.Errorf("%s documents %s, which the library does not read", d.file, v)
			}
		}
	}
	t.Logf("variables read: %v", sorted(read))
}

// runBare runs prog with no LD_* variable and HYBRIDSYNC_CUDA_LIB naming
// the CUDA stand-in, so that the loader finds libhybridsync only through
// what the program was linked with.
func runBare(t *testing.T, prog string) {
	t.Helper()
	cmd := exec.Command(prog)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HYBRIDSYNC_") && !strings.HasPrefix(kv, "LD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HYBRIDSYNC_CUDA_LIB="+filepath.Join(built.dir, "libcuda.so.1"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s without LD_LIBRARY_PATH: %v\n%s", prog, err, out)
	}
}

// TestBuildTree: `make lib` leaves a build tree that is a prefix of its
// own, as the README uses it: PKG_CONFIG_PATH=build/lib/pkgconfig
// pkg-config gives flags that build a C program which then runs without
// LD_LIBRARY_PATH, and CMAKE_PREFIX_PATH=build lets find_package build
// one that does too, both loading the build tree's library.
func TestBuildTree(t *testing.T) {
	need(t)
	root, _ := repoRoot()
	tree := filepath.Join(built.dir, "build") // make's HS_BUILD
	lib := filepath.Join(tree, "lib")
	src := filepath.Join(root, "libhybridsync", "testdata", "cmake", "consumer.c")
	major, _ := headerVersion(t)
	loads := func(t *testing.T, prog string) {
		t.Helper()
		runBare(t, prog)
		out, err := exec.Command("ldd", prog).CombinedOutput()
		want := "libhybridsync.so." + major + " => " + filepath.Join(lib, "libhybridsync.so."+major)
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("ldd %s: %v, want %q in\n%s", prog, err, want, out)
		}
	}
	t.Run("pkg-config", func(t *testing.T) {
		pc := exec.Command("pkg-config", "--cflags", "--libs", "hybridsync")
		pc.Env = append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(lib, "pkgconfig"))
		flags, err := pc.Output()
		if err != nil {
			t.Fatalf("PKG_CONFIG_PATH=%s/pkgconfig pkg-config --cflags --libs hybridsync: %v", lib, err)
		}
		prog := filepath.Join(t.TempDir(), "consumer_pc")
		args := append([]string{"-O2", "-Wall", "-Werror", "-o", prog, src}, strings.Fields(string(flags))...)
		if err := sh(built.dir, "gcc", args...); err != nil {
			t.Fatal(err)
		}
		loads(t, prog)
	})
	t.Run("cmake", func(t *testing.T) {
		if _, err := exec.LookPath("cmake"); err != nil {
			t.Skip("cmake not installed (.ci/setup-libhybridsync.sh installs it)")
		}
		bdir := t.TempDir()
		if err := sh(bdir, "cmake", "-S", filepath.Dir(src), "-B", bdir, "-DCMAKE_PREFIX_PATH="+tree); err != nil {
			t.Fatal(err)
		}
		if err := sh(bdir, "cmake", "--build", bdir); err != nil {
			t.Fatal(err)
		}
		loads(t, filepath.Join(bdir, "consumer"))
		runBare(t, filepath.Join(bdir, "consumer_static"))
	})
}

// lmodInit is Lmod's shell setup as Debian's lmod package installs it.
const lmodInit = "/usr/share/lmod/lmod/init/bash"

// TestModuleLoad: a site's recipe (docs/libhybridsync.md, "Environment
// modules for sites"): the library installed under its own prefix,
// `module use PREFIX/share/modulefiles` and `module load hybridsync` under
// Lmod, then what a user does with it: a program built with pkg-config's
// flags and one built by CMake's find_package run (the library found
// through the module's LD_LIBRARY_PATH, the CUDA stand-in through the
// test's), and hybridsync-run runs a program; `module unload` takes the
// prefix off PATH again. pkg-config prints no -L for the module's
// library: pkgconf leaves out directories in LIBRARY_PATH, which the
// module sets and the compiler searches.
func TestModuleLoad(t *testing.T) {
	need(t)
	if _, err := os.Stat(lmodInit); err != nil {
		t.Skipf("Lmod not installed (%v; .ci/setup-libhybridsync.sh installs the lmod package)", err)
	}
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("cmake not installed (.ci/setup-libhybridsync.sh installs it)")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bdir := t.TempDir()
	script := `set -e
. ` + lmodInit + `
module use "$PREFIX/share/modulefiles"
module load hybridsync
echo "libs=$(pkg-config --libs hybridsync)"
cc -o "$BDIR/pc_consumer" "$SRC/consumer.c" $(pkg-config --cflags --libs hybridsync)
"$BDIR/pc_consumer"
echo "run=$(command -v hybridsync-run)"
echo "man=$MANPATH"
cmake -S "$SRC" -B "$BDIR" >/dev/null
cmake --build "$BDIR" --target consumer >/dev/null
"$BDIR/consumer"
hybridsync-run true
echo "run-ok"
module unload hybridsync
echo "path-after=$PATH"
`
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script)
	// A user's environment without any other prefix in the search paths.
	cmd.Env = []string{
		"HOME=" + bdir, "PATH=/usr/local/bin:/usr/bin:/bin", "PREFIX=" + built.prefix, "BDIR=" + bdir,
		"SRC=" + filepath.Join(root, "libhybridsync", "testdata", "cmake"),
		"LD_LIBRARY_PATH=" + built.dir,
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("module load, then programs built with pkg-config and cmake, and hybridsync-run: %v\n%s", err, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			lines[k] = v
		}
	}
	if !strings.Contains(lines["libs"], "-lhybridsync") {
		t.Errorf("pkg-config --libs hybridsync after module load: %q, want -lhybridsync", lines["libs"])
	}
	if want := filepath.Join(built.prefix, "bin", "hybridsync-run"); lines["run"] != want {
		t.Errorf("hybridsync-run after module load is %q, want %s", lines["run"], want)
	}
	if !strings.Contains(lines["man"], filepath.Join(built.prefix, "share", "man")) {
		t.Errorf("MANPATH after module load: %q, want %s/share/man in it", lines["man"], built.prefix)
	}
	if !strings.Contains(string(out), "run-ok") {
		t.Errorf("hybridsync-run true did not finish:\n%s", out)
	}
	if strings.Contains(lines["path-after"], built.prefix) {
		t.Errorf("PATH after module unload still names the prefix: %s", lines["path-after"])
	}
}
