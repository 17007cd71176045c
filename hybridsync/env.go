package hybridsync

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// The HYBRIDSYNC_* variables: every one the library, its launcher and the
// Go primitive read, each validated by envVars below.
const (
	EnvMode      = "HYBRIDSYNC_MODE"        // hybrid (default), paper, spin, yield, block, cuda-auto
	EnvMaxSpin   = "HYBRIDSYNC_MAX_SPIN_US" // spin cap in µs, or "inf"; the paper's max_threshold
	EnvStats     = "HYBRIDSYNC_STATS"       // path of the stats JSON written at exit
	EnvLog       = "HYBRIDSYNC_LOG"         // log level: off (default), error, warn, info, debug
	EnvInterpose = "HYBRIDSYNC_INTERPOSE"   // 1/0: the C library's hooks (read by its constructor)
	EnvOpenMP    = "HYBRIDSYNC_OPENMP"      // auto (default), bounded, default, live: OpenMP's waits (hybridsync/openmp)
	EnvLibomp    = "HYBRIDSYNC_LIBOMP"      // the libomp that HYBRIDSYNC_OPENMP=live preloads
	EnvRunSet    = "HYBRIDSYNC_RUN_SET"     // NAME=VALUE of each variable hybridsync-run set
	EnvCUDALib   = "HYBRIDSYNC_CUDA_LIB"    // path of the CUDA driver library (libhybridsync/hscore)
	EnvCUDARTLib = "HYBRIDSYNC_CUDART_LIB"  // path of the CUDA runtime library (libhybridsync/hscore)
	envPrefix    = "HYBRIDSYNC_"
)

// LogLevels are EnvLog's levels, by number: the C library's HS_LOG_*
// (libhybridsync/hscore/core.h), whose list its tests check against this one.
var LogLevels = [...]string{"off", "error", "warn", "info", "debug"}

// The values of EnvOpenMP (hybridsync/openmp says what each does).
const (
	OpenMPAuto    = "auto"
	OpenMPBounded = "bounded"
	OpenMPDefault = "default"
	OpenMPLive    = "live"
)

var openMPModes = [...]string{OpenMPAuto, OpenMPBounded, OpenMPDefault, OpenMPLive}

// EnvConfig is what the environment, overridden by hs_init's arguments
// (Overrides), asks for: parsed once, by ParseConfig.
type EnvConfig struct {
	Config
	StatsPath string
	LogLevel  string
	OpenMP    string // one of the OpenMP* values; "" is OpenMPAuto
	HintsPath string // signal.EnvHints: the host's hint page, "" for none
	Libomp    string // EnvLibomp
	// Notice says why a part of the configuration is not in use yet (a
	// hint page that does not exist yet): for the log, not an error.
	Notice string
	// Refused says why a part of the configuration is not used at all (a
	// hint path that is not a regular file): for stderr whatever the log
	// level, since the user asked for it; the defaults stand in for it.
	Refused string
}

// envVars is every HYBRIDSYNC_* variable, each checked the same way: a
// value set (blanks around it ignored) fails with an error naming the
// variable, the value and what is accepted. Those that name files are
// taken as they are and judged when the file is used. A new variable is
// one line here (and a Config field where the primitive reads it).
var envVars = [...]struct {
	name    string
	accepts string
	set     func(c *EnvConfig, v string) bool
}{
	{EnvMode, oneOf(modeNames[:]), func(c *EnvConfig, v string) bool {
		m, err := ParseMode(v)
		c.Mode = m
		return err == nil
	}},
	{EnvMaxSpin, "a number of µs >= 0, or inf", func(c *EnvConfig, v string) bool {
		ns, err := ParseMicros(v)
		c.setMaxSpin(ns)
		return err == nil
	}},
	{EnvLog, oneOf(LogLevels[:]), func(c *EnvConfig, v string) bool {
		c.LogLevel = v
		return slices.Contains(LogLevels[:], v)
	}},
	// The C library's constructor reads it (libhybridsync/lib/interpose.c)
	// as off for 0 and on otherwise; a value that is neither stops the
	// library here, before it is used.
	{EnvInterpose, "1 or 0", func(c *EnvConfig, v string) bool { return v == "0" || v == "1" }},
	{EnvOpenMP, oneOf(openMPModes[:]), func(c *EnvConfig, v string) bool {
		c.OpenMP = v
		return slices.Contains(openMPModes[:], v)
	}},
	{EnvRunSet, "NAME=VALUE words (hybridsync-run sets it)", func(c *EnvConfig, v string) bool {
		for _, w := range strings.Fields(v) {
			if k, _, ok := strings.Cut(w, "="); !ok || k == "" {
				return false
			}
		}
		return true
	}},
	{signal.EnvHints, "a path", func(c *EnvConfig, v string) bool { c.HintsPath = v; return true }},
	{EnvStats, "a path", func(c *EnvConfig, v string) bool { c.StatsPath = v; return true }},
	{EnvLibomp, "a path", func(c *EnvConfig, v string) bool { c.Libomp = v; return true }},
	{EnvCUDALib, "a path", func(*EnvConfig, string) bool { return true }},
	{EnvCUDARTLib, "a path", func(*EnvConfig, string) bool { return true }},
}

// setMaxSpin sets an explicit spin cap: the paper's static max_threshold.
func (c *EnvConfig) setMaxSpin(ns int64) { c.MaxSpin, c.Threshold = ns, signal.Static(ns) }

func oneOf(names []string) string {
	n := len(names) - 1
	return strings.Join(names[:n], ", ") + " or " + names[n]
}

// set applies variable i's value v, blanks around it ignored, to c.
func set(c *EnvConfig, i int, v string) error {
	e := envVars[i]
	if v = strings.TrimSpace(v); v != "" && !e.set(c, v) {
		return fmt.Errorf("%s: bad value %q (want %s)", e.name, v, e.accepts)
	}
	return nil
}

// find is the index of variable name in envVars, -1 if none.
func find(name string) int {
	for i, e := range envVars {
		if e.name == name {
			return i
		}
	}
	return -1
}

// CheckEnv checks every HYBRIDSYNC_* variable of environ (NAME=VALUE
// words, os.Environ's form): one error per bad value, and one per name
// that is no variable of the library's (a misspelt one would be ignored
// silently). The C library's constructor calls it as it loads, whether or
// not the program ever calls CUDA, and says each on stderr.
func CheckEnv(environ []string) []error {
	var c EnvConfig
	var errs []error
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, envPrefix) {
			continue
		}
		i := find(k)
		if i < 0 {
			errs = append(errs, fmt.Errorf("%s: no such variable (the library reads %s)", k, oneOf(Variables())))
			continue
		}
		if err := set(&c, i, v); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Variables are the names of every HYBRIDSYNC_* variable.
func Variables() []string {
	out := make([]string, len(envVars))
	for i, e := range envVars {
		out[i] = e.name
	}
	return out
}

// Overrides are hs_init's arguments (struct hs_config): each one set
// replaces its variable's value, and is checked as that value would be.
type Overrides struct {
	Mode, StatsPath, LogLevel string
	// MaxSpinUS: 0 leaves HYBRIDSYNC_MAX_SPIN_US, < 0 is infinite.
	MaxSpinUS float64
}

// ParseConfig reads the HYBRIDSYNC_* variables through getenv (os.Getenv
// in production), overridden by o. An unset variable means the default; a
// malformed one is an error that names it, its value and what is
// accepted: the first one found.
func ParseConfig(getenv func(string) string, o Overrides) (EnvConfig, error) {
	over := map[string]string{EnvMode: o.Mode, EnvStats: o.StatsPath, EnvLog: o.LogLevel}
	var c EnvConfig
	for i, e := range envVars {
		if v := over[e.name]; v != "" {
			if err := set(&c, i, v); err != nil {
				return EnvConfig{}, fmt.Errorf("hs_config: %w", err)
			}
			continue
		}
		if e.name == EnvMaxSpin && o.MaxSpinUS != 0 {
			continue
		}
		if err := set(&c, i, getenv(e.name)); err != nil {
			return EnvConfig{}, err
		}
	}
	switch {
	case o.MaxSpinUS < 0:
		c.setMaxSpin(clock.Infinite)
	case o.MaxSpinUS > 0:
		if !(o.MaxSpinUS <= float64(clock.Infinite)/1e3) {
			return EnvConfig{}, fmt.Errorf("hs_config: max_spin_us %g: want at most %g", o.MaxSpinUS, float64(clock.Infinite)/1e3)
		}
		c.setMaxSpin(int64(o.MaxSpinUS * 1e3))
	}
	return c, nil
}

// ParseOnly is ParseConfig of the variables named alone, for a caller
// that needs only those (the launcher's OpenMP settings, the OpenMP
// follower's hint page), which a bad value of another does not stop.
func ParseOnly(getenv func(string) string, names ...string) (EnvConfig, error) {
	var c EnvConfig
	for _, name := range names {
		i := find(name)
		if i < 0 {
			return EnvConfig{}, fmt.Errorf("%s: no such variable", name)
		}
		if err := set(&c, i, getenv(name)); err != nil {
			return EnvConfig{}, err
		}
	}
	return c, nil
}

// AddSources gives c the sources that HintsPath asks for: the host's
// hint page, when named, answers both how much slice is left and whether
// the CPU is contended; where it cannot (missing, stale, torn, not a page
// at all) the guest-only estimate and the kernel's accounting do. Notice
// and Refused say what is not in use.
func (c *EnvConfig) AddSources() {
	if c.HintsPath == "" {
		return
	}
	hs, err := signal.HintsAt(c.HintsPath, &signal.GuestEstimator{}, &signal.SchedSignal{})
	var notes []string
	if c.Threshold == nil {
		c.Threshold = hs
	} else {
		// An explicit spin cap is the paper's static max_threshold, and
		// stays the threshold: the page answers contention only. Said,
		// since the user asked for both.
		notes = append(notes, fmt.Sprintf("%s: the remaining slice is %s's fixed cap; the page answers contention only", signal.EnvHints, EnvMaxSpin))
	}
	c.Contention = hs
	switch {
	case errors.Is(err, hintpage.ErrNotRegular):
		c.Refused = err.Error()
	case err != nil:
		notes = append(notes, err.Error())
	}
	c.Notice = strings.Join(notes, "; ")
}

// ConfigFromEnv is ParseConfig of the environment alone, with its
// sources (AddSources): how a Go program configures a Syncer as the C
// library would.
func ConfigFromEnv(getenv func(string) string) (EnvConfig, error) {
	c, err := ParseConfig(getenv, Overrides{})
	if err != nil {
		return EnvConfig{}, err
	}
	c.AddSources()
	return c, nil
}

// ParseMicros parses a non-negative number of microseconds, or "inf", into
// ns.
func ParseMicros(s string) (int64, error) {
	if s == "inf" {
		return clock.Infinite, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v != v || v > float64(clock.Infinite)/1e3 {
		return 0, fmt.Errorf("%q is not a number of microseconds >= 0 (or inf)", s)
	}
	return int64(v * 1e3), nil
}
