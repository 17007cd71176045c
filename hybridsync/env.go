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

// Environment variables that configure a Syncer without code changes (the
// C library and LD_PRELOAD read them).
const (
	EnvMode      = "HYBRIDSYNC_MODE"        // hybrid (default), paper, spin, yield, block, cuda-auto
	EnvMaxSpin   = "HYBRIDSYNC_MAX_SPIN_US" // spin cap in µs, or "inf"; the paper's max_threshold
	EnvStats     = "HYBRIDSYNC_STATS"       // path of the stats JSON written at exit
	EnvLog       = "HYBRIDSYNC_LOG"         // log level: off (default), error, warn, info, debug
	EnvInterpose = "HYBRIDSYNC_INTERPOSE"   // 1/0: the C library's hooks (read by its constructor)
)

// LogLevels are EnvLog's levels, by number: the C library's HS_LOG_*
// (libhybridsync/hscore/core.h), whose list its tests check against this one.
var LogLevels = [...]string{"off", "error", "warn", "info", "debug"}

// EnvConfig is what the environment asks for.
type EnvConfig struct {
	Config
	StatsPath string
	LogLevel  string
	// Notice says why a part of the configuration is not in use yet (a
	// hint page that does not exist yet): for the log, not an error.
	Notice string
	// Refused says why a part of the configuration is not used at all (a
	// hint path that is not a regular file): for stderr whatever the log
	// level, since the user asked for it; the defaults stand in for it.
	Refused string
}

// envVars are the variables with a fixed vocabulary, each checked the same
// way: a value set fails with an error naming the variable, the value and
// what is accepted. The others name files (HYBRIDSYNC_STATS, _HINTS,
// _CUDA_LIB, _CUDART_LIB) and are judged when the file is used.
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
		// An explicit cap is the paper's static max_threshold.
		c.MaxSpin, c.Threshold = ns, signal.Static(ns)
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
}

func oneOf(names []string) string {
	n := len(names) - 1
	return strings.Join(names[:n], ", ") + " or " + names[n]
}

// parseEnv applies every envVars variable set in getenv to c, blanks
// around a value ignored; the first bad one is the error.
func parseEnv(getenv func(string) string, c *EnvConfig) error {
	for _, e := range envVars {
		v := strings.TrimSpace(getenv(e.name))
		if v != "" && !e.set(c, v) {
			return fmt.Errorf("%s: bad value %q (want %s)", e.name, v, e.accepts)
		}
	}
	return nil
}

// CheckEnv checks every HYBRIDSYNC_* value with a fixed vocabulary, and
// does nothing else: the C library calls it before anything else (before
// looking for CUDA), so that a bad value is reported as what it is.
func CheckEnv(getenv func(string) string) error {
	var c EnvConfig
	return parseEnv(getenv, &c)
}

// ConfigFromEnv reads the HYBRIDSYNC_* variables through getenv (os.Getenv in
// production). An unset variable means the default; a malformed one is an
// error that names it, its value and what is accepted.
func ConfigFromEnv(getenv func(string) string) (EnvConfig, error) {
	var c EnvConfig
	if err := parseEnv(getenv, &c); err != nil {
		return EnvConfig{}, err
	}
	// The host's hint page, when named, answers both how much slice is
	// left and whether the CPU is contended; where it cannot (missing,
	// stale, torn, not a page at all) the guest-only estimate and the
	// kernel's accounting do.
	fallback := &signal.GuestEstimator{}
	if hs, err := signal.HintsFromEnv(getenv, fallback, &signal.SchedSignal{}); hs != nil {
		if c.Threshold == nil {
			c.Threshold = hs
		}
		c.Contention = hs
		switch {
		case errors.Is(err, hintpage.ErrNotRegular):
			c.Refused = err.Error()
		case err != nil:
			c.Notice = err.Error()
		}
	}
	c.StatsPath = getenv(EnvStats)
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
