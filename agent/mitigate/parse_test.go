package mitigate

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := map[string]time.Duration{
		"slice=100us": 100 * time.Microsecond,
		"slice=100µs": 100 * time.Microsecond,
		"slice=250μs": 250 * time.Microsecond,
		"slice=1ms":   time.Millisecond,
		"slice=0.5ms": 500 * time.Microsecond,
		"slice=100ms": 100 * time.Millisecond,
		" slice=2ms ": 2 * time.Millisecond,
	}
	for in, want := range good {
		c, err := Parse(in)
		if err != nil || c.Slice != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, c.Slice, err, want)
		}
	}
	for _, in := range []string{"", "slice", "slice=", "100us", "slices=100us", "slice=99us", "slice=101ms",
		"slice=1s", "slice=100000ns", "slice=1m", "slice=-100us", "slice=abcus", "slice=100", "slice=100us,x=1"} {
		_, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q): no error", in)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "slice=100us") {
			t.Errorf("Parse(%q): %q is not a one-line usage", in, msg)
		}
	}
}
