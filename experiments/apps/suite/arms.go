package suite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ArmsHelp says what each arm does, for apps' help.
const ArmsHelp = `  cuda-default        the command as is
  cuda-blocking       under LD_PRELOAD=--blocksync, CUDA's own blocking-sync mode
  hybridsync          under LD_PRELOAD=--lib, libhybridsync.so in its default mode
  hybridsync-linked   the program's build that links the library ("linked" in its suite entry)
  cuda-default-again  cuda-default once more: the A/A control
  omp-passive         OMP_WAIT_POLICY=PASSIVE: OpenMP's threads sleep as soon as they wait
  omp-spin1k          GOMP_SPINCOUNT=1000: GNU OpenMP's threads spin 1000 times, then sleep
  hybridsync-run      under --launcher, the library's hybridsync-run CMD...: the
                      library preloaded, GNU OpenMP's spin following the
                      CPUs' contention while the program runs
  hybridsync-run-live the same with HYBRIDSYNC_OPENMP=live: the launcher also
                      preloads LLVM's libomp, which runs a program built for
                      GNU libgomp, so that the library adapts its spin while
                      the program runs

The first three run unless --arms says otherwise. The last four start
from an environment without OMP_WAIT_POLICY, GOMP_SPINCOUNT and
KMP_BLOCKTIME, so that each runs the setting it names; they need a
program run as a process of its own (OpenMP reads them once, at load).`

// ompWaitVars set how OpenMP's threads wait: GNU libgomp reads the first
// two, LLVM's libomp the first and the last. The OpenMP arms and the
// launcher's start without them.
var ompWaitVars = []string{"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"}

// separateOnly are the arms only a program run as a process of its own
// can take: what they set is read once, when the process starts.
var separateOnly = []string{"omp-passive", "omp-spin1k", "hybridsync-run", "hybridsync-run-live"}

// launched reports whether the arm starts the program through the
// launcher.
func launched(arm string) bool { return arm == "hybridsync-run" || arm == "hybridsync-run-live" }

// LauncherName is the library's launcher, built to build/bin by `make
// lib` and installed to PREFIX/bin by `make install-lib`.
const LauncherName = "hybridsync-run"

// loadsLib reports whether the arm runs the program with libhybridsync
// loaded, whose stats it then writes to HYBRIDSYNC_STATS.
func loadsLib(arm string) bool {
	return arm == "hybridsync" || arm == "hybridsync-linked" || launched(arm)
}

// armEnv returns the environment an arm adds to the program's.
func (c *Config) armEnv(arm, statsFile string) []string {
	preload := func(lib string) string {
		if cur := os.Getenv("LD_PRELOAD"); cur != "" {
			return "LD_PRELOAD=" + cur + ":" + lib
		}
		return "LD_PRELOAD=" + lib
	}
	var env []string
	switch arm {
	case "cuda-blocking":
		env = append(env, preload(c.Blocksync))
	case "hybridsync":
		env = append(env, preload(c.Lib))
	case "omp-passive":
		env = append(env, "OMP_WAIT_POLICY=PASSIVE")
	case "omp-spin1k":
		env = append(env, "GOMP_SPINCOUNT=1000")
	case "hybridsync-run-live":
		env = append(env, "HYBRIDSYNC_OPENMP=live")
	}
	if loadsLib(arm) && statsFile != "" {
		env = append(env, "HYBRIDSYNC_STATS="+statsFile)
	}
	return env
}

// armUnset returns the variables an arm takes out of the program's
// environment: the OpenMP arms and the launcher's run the wait setting
// they name, not one the suite's own environment holds.
func armUnset(arm string) []string {
	if slices.Contains(separateOnly, arm) {
		return slices.Clone(ompWaitVars)
	}
	return nil
}

// armArgs returns the program's command line in an arm: the launcher's
// arm starts it through the launcher.
func (c *Config) armArgs(p *Program, arm string) []string {
	argv := p.args(arm, c.Seconds)
	if launched(arm) {
		argv = append([]string{c.Launcher}, argv...)
	}
	return argv
}

// checkArms says why program p cannot run the arms asked for.
func (p Program) checkArms(arms []string) error {
	if !p.InProcess {
		return nil
	}
	var bad []string
	for _, a := range separateOnly {
		if slices.Contains(arms, a) {
			bad = append(bad, a)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("program %s compares the arms in one process, but %s need a process of their own (OpenMP reads its wait settings once, at load): drop them from --arms or --only it out",
			p.Name, strings.Join(bad, ", "))
	}
	return nil
}

// LauncherFor returns where the launcher that goes with the library lib
// is: bin/hybridsync-run beside lib's folder (build/lib and build/bin,
// PREFIX/lib and PREFIX/bin), or beside its parent (a LIBDIR of
// PREFIX/lib/x86_64-linux-gnu); the first that exists, else the first.
func LauncherFor(lib string) string {
	dir := filepath.Dir(lib)
	candidates := []string{
		filepath.Join(dir, "..", "bin", LauncherName),
		filepath.Join(dir, "..", "..", "bin", LauncherName),
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c
		}
	}
	return candidates[0]
}

// checkLauncher finds the launcher of the hybridsync-run arms, when one
// is asked for: --launcher, else the one beside --lib (LauncherFor).
func (c *Config) checkLauncher() error {
	if !slices.ContainsFunc(c.Arms, launched) {
		return nil
	}
	path := c.Launcher
	if path == "" {
		if c.Lib == "" {
			return errors.New("the hybridsync-run arm needs the library's launcher: give --launcher PATH, or --lib with bin/" + LauncherName + " beside its folder")
		}
		path = LauncherFor(c.Lib)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("--launcher: %w", err)
	}
	st, err := os.Stat(abs)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("the hybridsync-run arm needs the library's launcher, and %s is no executable file (make lib builds build/bin/%s, make install-lib PREFIX/bin/%s; or give --launcher PATH)",
			abs, LauncherName, LauncherName)
	}
	c.Launcher = abs
	return nil
}

// OMPEnvNote names the OpenMP wait variables set in this process's
// environment, which the arms other than the OpenMP ones and the
// launcher's pass on; "" when none is.
func OMPEnvNote(arms []string) string {
	var set []string
	for _, v := range ompWaitVars {
		if val, ok := os.LookupEnv(v); ok {
			set = append(set, v+"="+val)
		}
	}
	if len(set) == 0 || !slices.ContainsFunc(arms, func(a string) bool { return !slices.Contains(separateOnly, a) }) {
		return ""
	}
	return fmt.Sprintf("%s set here: every arm but %s runs with it", strings.Join(set, " "), strings.Join(separateOnly, ", "))
}
