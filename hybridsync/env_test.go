package hybridsync_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// TestConfigFromEnvHints: HYBRIDSYNC_HINTS names the page that answers both
// the remaining slice and the contention; a page that does not exist yet
// is a notice for the log, not an error, and the defaults stand in for it.
func TestConfigFromEnvHints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-page-yet")
	env := map[string]string{signal.EnvHints: path}
	c, err := hybridsync.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	hs, ok := c.Threshold.(*signal.HintSource)
	if !ok || c.Contention != hs {
		t.Fatalf("threshold %T, contention %T: want the hint source for both", c.Threshold, c.Contention)
	}
	if !strings.Contains(c.Notice, signal.EnvHints) {
		t.Errorf("notice %q: want it to name %s", c.Notice, signal.EnvHints)
	}
	// Without a page, the source falls back and says so in the stats.
	hs.Contention(1, clock.Now())
	s := hybridsync.New(c.Config)
	st := s.Stats(nil)
	if st.Hints == nil {
		t.Fatal("stats: no hints section with HYBRIDSYNC_HINTS set")
	}
	var fell uint64
	for _, n := range st.Hints.Fallbacks {
		fell += n
	}
	if st.Hints.Used != 0 || fell == 0 {
		t.Errorf("stats: hints %+v, want fallbacks and no use of a missing page", st.Hints)
	}

	c, err = hybridsync.ConfigFromEnv(func(string) string { return "" })
	if err != nil || c.Threshold != nil || c.Contention != nil || c.Notice != "" {
		t.Errorf("unset: threshold %v contention %v notice %q err %v", c.Threshold, c.Contention, c.Notice, err)
	}
}

// TestCheckEnv: each variable with a fixed vocabulary is checked alike,
// its error naming the variable, the value and what is accepted; good
// values (blanks around them ignored) pass, and ConfigFromEnv agrees.
func TestCheckEnv(t *testing.T) {
	for _, tc := range []struct {
		name      string
		good, bad []string
		accepts   string
	}{
		{hybridsync.EnvMode, hybridsync.Modes(), []string{"bogus", "Spin", "hybrid,spin"}, "hybrid, paper, spin, yield, block or cuda-auto"},
		{hybridsync.EnvMaxSpin, []string{"0", "250", "1.5", "inf", " 10 "}, []string{"-1", "NaN", "10us", "infinity"}, "a number of µs >= 0, or inf"},
		{hybridsync.EnvLog, hybridsync.LogLevels[:], []string{"bogus", "INFO", "2"}, "off, error, warn, info or debug"},
		{hybridsync.EnvInterpose, []string{"0", "1", " 1\n"}, []string{"yes", "on", "2", "01"}, "1 or 0"},
		{hybridsync.EnvOpenMP, []string{"auto", "bounded", "default", " live "}, []string{"bogus", "Auto", "on"}, "auto, bounded, default or live"},
		{hybridsync.EnvRunSet, []string{"GOMP_SPINCOUNT=299917", "A=1 B="}, []string{"GOMP_SPINCOUNT", "=1"}, "NAME=VALUE words (hybridsync-run sets it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range append(tc.good, "", "  ") {
				env := func(k string) string { return map[string]string{tc.name: v}[k] }
				if errs := hybridsync.CheckEnv([]string{tc.name + "=" + v}); errs != nil {
					t.Errorf("%q: %v", v, errs)
				}
				if _, err := hybridsync.ConfigFromEnv(env); err != nil {
					t.Errorf("ConfigFromEnv, %q: %v", v, err)
				}
			}
			for _, v := range tc.bad {
				env := func(k string) string { return map[string]string{tc.name: v}[k] }
				want := tc.name + `: bad value "` + v + `" (want ` + tc.accepts + ")"
				if errs := hybridsync.CheckEnv([]string{"PATH=/bin", tc.name + "=" + v}); len(errs) != 1 || errs[0].Error() != want {
					t.Errorf("%q: errors %v, want %s", v, errs, want)
				}
				if _, err := hybridsync.ConfigFromEnv(env); err == nil || err.Error() != want {
					t.Errorf("ConfigFromEnv, %q: error %v, want %s", v, err, want)
				}
			}
		})
	}
}

// TestConfigFromEnvHintsRefused: a hint path that is not a regular file is
// refused (for stderr, not the log: the user asked for it) and the source
// falls back, as for a bad page.
func TestConfigFromEnvHintsRefused(t *testing.T) {
	c, err := hybridsync.ConfigFromEnv(func(k string) string {
		return map[string]string{signal.EnvHints: t.TempDir()}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Contention.(*signal.HintSource); !ok || c.Notice != "" ||
		!strings.Contains(c.Refused, "HYBRIDSYNC_HINTS: hint page: not a regular file") {
		t.Errorf("contention %T, notice %q, refused %q: want the hint source, refused", c.Contention, c.Notice, c.Refused)
	}
}

// TestCheckEnvEvery: CheckEnv says every bad value and every name that is
// no variable of the library's, one error each, and nothing of variables
// that are not the library's; ParseConfig stops at the first.
func TestCheckEnvEvery(t *testing.T) {
	environ := []string{"HYBRIDSYNC_MODE=bogus", "HOME=/", "HYBRIDSYNC_LOG=loud", "HYBRIDSYNC_MAXSPIN_US=5", "HYBRIDSYNC_STATS=/tmp/s.json"}
	errs := hybridsync.CheckEnv(environ)
	var got []string
	for _, err := range errs {
		got = append(got, err.Error())
	}
	if len(got) != 3 || !strings.HasPrefix(got[0], "HYBRIDSYNC_MODE: bad value") || !strings.HasPrefix(got[1], "HYBRIDSYNC_LOG: bad value") ||
		!strings.HasPrefix(got[2], "HYBRIDSYNC_MAXSPIN_US: no such variable") || !strings.Contains(got[2], "HYBRIDSYNC_MAX_SPIN_US") {
		t.Errorf("errors %q: want the mode, the log level and the misspelt name, in order", got)
	}
	for _, name := range hybridsync.Variables() {
		if errs := hybridsync.CheckEnv([]string{name + "="}); errs != nil {
			t.Errorf("%s empty: %v", name, errs)
		}
	}
}

// TestParseConfigOverrides: hs_init's arguments replace their variables
// and are checked by the same rules, naming where they came from; a
// negative spin cap is infinite.
func TestParseConfigOverrides(t *testing.T) {
	env := map[string]string{hybridsync.EnvMode: "spin", hybridsync.EnvMaxSpin: "5"}
	bad := func(k string) string {
		return map[string]string{hybridsync.EnvMode: "bogus", hybridsync.EnvMaxSpin: "x"}[k]
	}
	if c, err := hybridsync.ParseConfig(bad, hybridsync.Overrides{Mode: "yield", MaxSpinUS: 1}); err != nil || c.Mode != hybridsync.ModeYield {
		t.Errorf("an argument replaces a bad variable: mode %v err %v", c.Mode, err)
	}
	getenv := func(k string) string { return env[k] }
	c, err := hybridsync.ParseConfig(getenv, hybridsync.Overrides{Mode: "block", MaxSpinUS: 2.5})
	if err != nil || c.Mode != hybridsync.ModeBlock || c.MaxSpin != 2500 {
		t.Errorf("mode %v max spin %d err %v, want block 2500", c.Mode, c.MaxSpin, err)
	}
	if c, err = hybridsync.ParseConfig(getenv, hybridsync.Overrides{MaxSpinUS: -1}); err != nil || c.Mode != hybridsync.ModeSpin || c.MaxSpin != clock.Infinite {
		t.Errorf("infinite: mode %v max spin %d err %v", c.Mode, c.MaxSpin, err)
	}
	want := `hs_config: HYBRIDSYNC_LOG: bad value "loud" (want off, error, warn, info or debug)`
	if _, err := hybridsync.ParseConfig(getenv, hybridsync.Overrides{LogLevel: "loud"}); err == nil || err.Error() != want {
		t.Errorf("bad log level: %v, want %s", err, want)
	}
}

// TestConfigFromEnvHintsWithSpinCap: with both a hint page and a spin cap,
// the cap stays the threshold and the page answers contention, and the
// log is told so.
func TestConfigFromEnvHintsWithSpinCap(t *testing.T) {
	env := map[string]string{signal.EnvHints: filepath.Join(t.TempDir(), "no-page-yet"), hybridsync.EnvMaxSpin: "50"}
	c, err := hybridsync.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Contention.(*signal.HintSource); !ok || c.Threshold != signal.Static(50_000) {
		t.Errorf("contention %T, threshold %v: want the page, and the 50 µs cap", c.Contention, c.Threshold)
	}
	if !strings.Contains(c.Notice, "the page answers contention only") {
		t.Errorf("notice %q: want it to say the cap stays the threshold", c.Notice)
	}
}
