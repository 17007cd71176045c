package hybridsync

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Environment variables that configure a Syncer without code changes (the
// C library and LD_PRELOAD read them).
const (
	EnvMode    = "HYBRIDSYNC_MODE"        // hybrid (default), paper, spin, yield, block, cuda-auto
	EnvMaxSpin = "HYBRIDSYNC_MAX_SPIN_US" // spin cap in µs, or "inf"; the paper's max_threshold
	EnvStats   = "HYBRIDSYNC_STATS"       // path of the stats JSON written at exit
	EnvLog     = "HYBRIDSYNC_LOG"         // log level: off (default), error, warn, info, debug
)

// LogLevels are EnvLog's levels, by number: the C library's HS_LOG_*
// (cgo/hscore/core.h), whose list its tests check against this one.
var LogLevels = [...]string{"off", "error", "warn", "info", "debug"}

// EnvConfig is what the environment asks for.
type EnvConfig struct {
	Config
	StatsPath string
	LogLevel  string
	// Notice says why a part of the configuration is not in use yet (a
	// hint page that does not exist yet): for the log, not an error.
	Notice string
}

// ConfigFromEnv reads the HYBRIDSYNC_* variables through getenv (os.Getenv in
// production). An unset variable means the default; a malformed one is an
// error that names it.
func ConfigFromEnv(getenv func(string) string) (EnvConfig, error) {
	var c EnvConfig
	if v := strings.TrimSpace(getenv(EnvMode)); v != "" {
		m, err := ParseMode(v)
		if err != nil {
			return c, fmt.Errorf("%s: %w", EnvMode, err)
		}
		c.Mode = m
	}
	if v := strings.TrimSpace(getenv(EnvMaxSpin)); v != "" {
		ns, err := ParseMicros(v)
		if err != nil {
			return c, fmt.Errorf("%s: %w", EnvMaxSpin, err)
		}
		c.MaxSpin = ns
		// An explicit cap is the paper's static max_threshold.
		c.Threshold = Static(ns)
	}
	// The host's hint page, when named, answers both how much slice is
	// left and whether the CPU is contended; where it cannot (missing,
	// stale, torn) the guest-only estimate and the kernel's accounting do.
	fallback := &GuestEstimator{}
	if hs, err := HintsFromEnv(getenv, fallback, &SchedSignal{}); hs != nil {
		if c.Threshold == nil {
			c.Threshold = hs
		}
		c.Contention = hs
		if err != nil {
			c.Notice = err.Error()
		}
	}
	c.StatsPath = getenv(EnvStats)
	c.LogLevel = strings.TrimSpace(getenv(EnvLog))
	if c.LogLevel != "" && !slices.Contains(LogLevels[:], c.LogLevel) {
		n := len(LogLevels) - 1
		return c, fmt.Errorf("%s: unknown level %q (want %s or %s)", EnvLog, c.LogLevel,
			strings.Join(LogLevels[:n], ", "), LogLevels[n])
	}
	return c, nil
}

// ParseMicros parses a non-negative number of microseconds, or "inf", into
// ns.
func ParseMicros(s string) (int64, error) {
	if s == "inf" {
		return Infinite, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v != v || v > float64(Infinite)/1e3 {
		return 0, fmt.Errorf("%q is not a number of microseconds >= 0 (or inf)", s)
	}
	return int64(v * 1e3), nil
}
