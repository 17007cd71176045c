package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Parts are the files advise runs a program with: the library for the
// hybridsync way, the blocking-sync shim for cuda-blocking, the
// launcher for hybridsync-run ("" leaves that way out).
type Parts struct {
	Lib, Blocksync, Launcher string
}

// BlocksyncPath is where `make` builds the blocking-sync shim under the
// build tree, and `make install` installs it under the prefix: a
// directory of this program's own in the library directory, not a
// library of the system's.
const BlocksyncPath = "lib/vgpu-probe/blocksync.so"

// prefixes are where the parts of a build or an install are, for the
// binary exe: the build tree beside it (`make` builds ./vgpu-probe and
// build/...), and the prefix of a bin/ it is in (`make install`), for
// the path as run and for the file a link to it names.
func prefixes(exe string) []string {
	var out []string
	add := func(dir string) {
		ps := []string{filepath.Join(dir, "build")}
		if filepath.Base(dir) == "bin" {
			ps = append(ps, filepath.Dir(dir))
		}
		for _, p := range ps {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	add(filepath.Dir(exe))
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		add(filepath.Dir(real))
	}
	return out
}

// libDirs are a prefix's library directories: lib, lib64, and the
// multiarch ones under lib (lib/x86_64-linux-gnu), where LIBDIR put them.
func libDirs(prefix string) []string {
	dirs := []string{filepath.Join(prefix, "lib"), filepath.Join(prefix, "lib64")}
	multi, _ := filepath.Glob(filepath.Join(prefix, "lib", "*-linux-*"))
	return append(dirs, multi...)
}

// regular reports whether path is a regular file (through links).
func regular(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// FindParts fills the parts that given leaves empty from beside the
// binary exe (prefixes): the library and the shim must be found, else
// the error says where it looked and how to build them; the launcher
// is optional, its way left out with a note when it is not found (beside
// the library's folder first, as the library's build and install put
// it). A part given that is not a file is an error.
func FindParts(given Parts, exe string) (Parts, []string, error) {
	p, looked := built(given, prefixes(exe))
	for _, part := range []struct {
		flag, path, name, how string
	}{
		{"--lib", p.Lib, "libhybridsync.so", "run make in the source tree (build/lib), or make install-lib"},
		{"--blocksync", p.Blocksync, "blocksync.so", "run make in the source tree (build/" + BlocksyncPath + "), or gcc -shared -fPIC -O2 -o blocksync.so advise/blocksync/blocksync.c -ldl"},
	} {
		switch {
		case part.path == "":
			return p, nil, fmt.Errorf("no %s at %s: %s, or give %s", part.name, strings.Join(looked[part.flag], " or "), part.how, part.flag)
		case !regular(part.path):
			return p, nil, fmt.Errorf("%s %s: not a file", part.flag, part.path)
		}
	}
	if p.Launcher == "" {
		return p, []string{fmt.Sprintf("no %s beside %s: the way hybridsync-run is left out (make builds build/bin/%s; or give --launcher)",
			LauncherName, p.Lib, LauncherName)}, nil
	}
	if !executable(p.Launcher) {
		return p, nil, fmt.Errorf("--launcher %s: not an executable file", p.Launcher)
	}
	return p, nil, nil
}

// Built fills the parts that given leaves empty with those found beside
// the binary exe, as FindParts finds them, and leaves empty those not
// found: apps, whose arms each need only some of them (Check says which
// is missing).
func Built(given Parts, exe string) Parts {
	p, _ := built(given, prefixes(exe))
	return p
}

// built fills the parts given leaves empty with those found under the
// prefixes pre, and returns, per flag, where it looked for one it did not
// find. The launcher is looked for beside the library's folder first.
func built(given Parts, pre []string) (Parts, map[string][]string) {
	p := given
	looked := map[string][]string{}
	find := func(flag string, path *string, rel string) {
		if *path != "" {
			return
		}
		for _, pr := range pre {
			for _, d := range libDirs(pr) {
				c := filepath.Join(d, rel)
				if regular(c) {
					*path = c
					return
				}
				if filepath.Base(d) == "lib" {
					looked[flag] = append(looked[flag], c)
				}
			}
		}
	}
	find("--lib", &p.Lib, "libhybridsync.so")
	find("--blocksync", &p.Blocksync, filepath.Join("vgpu-probe", "blocksync.so"))
	if p.Launcher == "" && p.Lib != "" {
		candidates := []string{LauncherFor(p.Lib)}
		for _, pr := range pre {
			candidates = append(candidates, filepath.Join(pr, "bin", LauncherName))
		}
		for _, c := range candidates {
			if executable(c) {
				p.Launcher = c
				break
			}
		}
	}
	return p, looked
}

// executable reports whether path is a regular file someone may run.
func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
