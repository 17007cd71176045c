package mitigate

import (
	"fmt"
	"strings"
	"time"
)

// The kernel clamps a fair thread's sched_runtime to this range; a value
// outside it would silently become the bound, so it is refused instead.
const (
	MinSlice = 100 * time.Microsecond
	MaxSlice = 100 * time.Millisecond
)

// Config is a parsed --mitigate value.
type Config struct {
	// Slice is the EEVDF slice given to watched threads.
	Slice time.Duration
}

// Usage describes the accepted syntax, for flag help and errors.
const Usage = "slice=DURATION, DURATION in us, µs or ms between 100us and 100ms (e.g. slice=100us)"

// Parse reads a --mitigate value such as "slice=100us".
func Parse(s string) (Config, error) {
	key, val, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || key != "slice" {
		return Config{}, fmt.Errorf("--mitigate %q: want %s", s, Usage)
	}
	d, err := parseSlice(val)
	if err != nil {
		return Config{}, fmt.Errorf("--mitigate %q: %v; want %s", s, err, Usage)
	}
	return Config{Slice: d}, nil
}

// parseSlice accepts only microseconds and milliseconds: a slice in ns or
// s is out of range anyway, and "1m" (a minute) is an easy typo for 1ms.
func parseSlice(v string) (time.Duration, error) {
	if !strings.HasSuffix(v, "us") && !strings.HasSuffix(v, "µs") && !strings.HasSuffix(v, "μs") && !strings.HasSuffix(v, "ms") {
		return 0, fmt.Errorf("slice %q has no unit us, µs or ms", v)
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("slice %q is not a duration", v)
	}
	if d < MinSlice || d > MaxSlice {
		return 0, fmt.Errorf("slice %v is outside the kernel's range", d)
	}
	return d, nil
}
