package ctest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBadEnv: every HYBRIDSYNC_* variable with a fixed vocabulary is
// checked alike, before anything else: a bad value is HS_ERR_CONFIG from
// hs_init, with or without a CUDA driver (not "CUDA driver not
// available"), and one line on stderr naming the variable, the value
// and what is accepted, at every log level, the default (off) included:
// off silences chatter, not a setting the library will not follow. The
// waits are then CUDA's own, and under LD_PRELOAD the program runs as
// without the library.
func TestBadEnv(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	for _, tc := range []struct{ name, value, accepts string }{
		{"HYBRIDSYNC_MODE", "bogus", "hybrid, paper, spin, yield, block or cuda-auto"},
		{"HYBRIDSYNC_MAX_SPIN_US", "-5", "a number of µs >= 0, or inf"},
		{"HYBRIDSYNC_LOG", "bogus", "off, error, warn, info or debug"},
		{"HYBRIDSYNC_INTERPOSE", "yes", "1 or 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := tc.name + `: bad value "` + tc.value + `" (want ` + tc.accepts + ")"
			bad := tc.name + "=" + tc.value
			env := []string{bad}
			saysOnce := func(t *testing.T, how string, stderr string) {
				t.Helper()
				if strings.Count(stderr, line) != 1 || !strings.HasPrefix(stderr, "hybridsync[") {
					t.Errorf("%s: stderr %q, want one line saying %s", how, stderr, line)
				}
			}
			for _, prog := range links {
				r := run(t, env, prog, "badenv", tc.name, "cuda")
				saysOnce(t, prog, r.stderr)
			}
			if tc.name != "HYBRIDSYNC_LOG" {
				for _, level := range []string{"off", "error"} {
					r := run(t, append(env, "HYBRIDSYNC_LOG="+level), "hsapp_so", "badenv", tc.name, "cuda")
					saysOnce(t, "HYBRIDSYNC_LOG="+level, r.stderr)
				}
			}
			stats := filepath.Join(t.TempDir(), "stats.json")
			r := run(t, append(env, "HYBRIDSYNC_CUDA_LIB=/nonexistent/libcuda.so.1", "HYBRIDSYNC_STATS="+stats),
				"hsapp_so", "badenv", tc.name, "nocuda")
			saysOnce(t, "no CUDA driver", r.stderr)
			if strings.Contains(r.stderr, "CUDA driver") {
				t.Errorf("no CUDA driver: stderr %q, want the bad value reported instead", r.stderr)
			}
			if why := unengaged(t, stats); !strings.Contains(why, line) {
				t.Errorf("no CUDA driver: stats reason %q", why)
			}
			r = run(t, append(env, "LD_PRELOAD="+so), "rtapp_dyn", "5", "1")
			saysOnce(t, "LD_PRELOAD", r.stderr)
			if tc.name == "HYBRIDSYNC_LOG" {
				return
			}
			// Blanks around a value are ignored, in C as in Go: off is
			// off, and the bad value is still said.
			r = run(t, []string{bad, "HYBRIDSYNC_LOG= off\t"}, "hsapp_so", "badenv", tc.name, "cuda")
			saysOnce(t, "HYBRIDSYNC_LOG=' off'", r.stderr)
		})
	}
}

// TestBadEnvAtLoad: every bad HYBRIDSYNC_* value, and a name that is no
// variable of the library's, is said once as the library loads, one line
// each, whether or not the program ever calls CUDA or the library: a
// program linked with it that calls nothing, `true` under LD_PRELOAD and
// under hybridsync-run, and a CUDA program under LD_PRELOAD.
func TestBadEnvAtLoad(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	launcher := filepath.Join(built.prefix, "bin", "hybridsync-run")
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) on PATH")
	}
	mode := `HYBRIDSYNC_MODE: bad value "bogus" (want hybrid, paper, spin, yield, block or cuda-auto)`
	spin := `HYBRIDSYNC_MAX_SPIN_US: bad value "abc" (want a number of µs >= 0, or inf)`
	for _, tc := range []struct {
		env   []string
		lines []string
	}{
		{[]string{"HYBRIDSYNC_MODE=bogus"}, []string{mode}},
		{[]string{"HYBRIDSYNC_LOG=bogus"}, []string{`HYBRIDSYNC_LOG: bad value "bogus" (want off, error, warn, info or debug)`}},
		{[]string{"HYBRIDSYNC_MAX_SPIN_US=abc", "HYBRIDSYNC_MODE=bogus"}, []string{mode, spin}},
		{[]string{"HYBRIDSYNC_MAXSPIN_US=5"}, []string{"HYBRIDSYNC_MAXSPIN_US: no such variable"}},
	} {
		t.Run(strings.Join(tc.env, ","), func(t *testing.T) {
			// says: each line once; nothing else where the program
			// itself says nothing.
			says := func(how string, r result, only bool) {
				t.Helper()
				for _, line := range tc.lines {
					if strings.Count(r.stderr, line) != 1 {
						t.Errorf("%s: stderr %q, want one line saying %s", how, r.stderr, line)
					}
				}
				if n := strings.Count(r.stderr, "\n"); only && n != len(tc.lines) {
					t.Errorf("%s: stderr %q: %d lines, want %d", how, r.stderr, n, len(tc.lines))
				}
			}
			for _, prog := range links {
				says(prog+" (no call)", run(t, tc.env, prog, "idle"), true)
			}
			says("LD_PRELOAD true", run(t, append(tc.env, "LD_PRELOAD="+so), truePath), true)
			says("hybridsync-run true", run(t, tc.env, launcher, truePath), true)
			says("LD_PRELOAD, CUDA calls", run(t, append(tc.env, "LD_PRELOAD="+so), "rtapp_dyn", "5", "1"), false)
		})
	}
}

// hintsLimit bounds each run of TestHintsNotAPage: a run that reads the
// hint path with a blocking open never ends (a FIFO waits for a writer).
const hintsLimit = time.Minute

// TestHintsNotAPage: HYBRIDSYNC_HINTS naming something that is not a
// regular file (a FIFO, whose open blocks until a writer comes; a device;
// a directory) is refused at once, with one line on stderr saying why at
// every log level, and the library falls back as for a bad page; it never
// hangs the program.
func TestHintsNotAPage(t *testing.T) {
	need(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	for _, tc := range []struct{ name, path string }{{"fifo", fifo}, {"device", os.DevNull}, {"directory", dir}} {
		path := tc.path
		t.Run(tc.name, func(t *testing.T) {
			why := "HYBRIDSYNC_HINTS: hint page: not a regular file: " + path
			env := []string{"HYBRIDSYNC_HINTS=" + path, "HYBRIDSYNC_LOG=error"}
			r := runBounded(t, append(env, "LD_PRELOAD="+so), "rtapp_dyn", "5", "1")
			if strings.Count(r.stderr, why) != 1 {
				t.Errorf("LD_PRELOAD: stderr %q, want one line saying %s", r.stderr, why)
			}
			r = runBounded(t, env, "hsapp_so", "basic")
			if !strings.Contains(r.stderr, why) {
				t.Errorf("explicit API: stderr %q, want a line saying %s", r.stderr, why)
			}
			// The source is there and falls back, as for a bad page.
			var s struct {
				Hints *struct {
					Used      uint64            `json:"used"`
					Fallbacks map[string]uint64 `json:"fallbacks"`
				} `json:"hints"`
			}
			i := strings.Index(r.stderr, "STATS ")
			if i < 0 {
				t.Fatalf("no stats in stderr: %q", r.stderr)
			}
			if err := json.Unmarshal([]byte(strings.SplitN(r.stderr[i+6:], "\n", 2)[0]), &s); err != nil {
				t.Fatal(err)
			}
			if s.Hints == nil || s.Hints.Used != 0 || s.Hints.Fallbacks["missing"] == 0 {
				t.Errorf("stats: hints %+v, want every answer from the fallbacks", s.Hints)
			}
			// A path the library refuses is said at every log level.
			r = runBounded(t, []string{"HYBRIDSYNC_HINTS=" + path, "LD_PRELOAD=" + so}, "rtapp_dyn", "5", "1")
			if strings.Count(r.stderr, why) != 1 {
				t.Errorf("no HYBRIDSYNC_LOG: stderr %q, want one line saying %s", r.stderr, why)
			}
		})
	}
}

// runBounded is run within hintsLimit.
func runBounded(t *testing.T, env []string, prog string, args ...string) result {
	t.Helper()
	r, err := runWithin(hintsLimit, env, prog, args...)
	if err != nil {
		t.Fatalf("%s %v: %v (a run is killed after %v)\nstderr:\n%s", prog, args, err, hintsLimit, r.stderr)
	}
	if r.stdout != "" {
		t.Fatalf("%s %v wrote to stdout: %q", prog, args, r.stdout)
	}
	return r
}
