package hybridsync

import "fmt"

// Mode selects the wait policy.
type Mode int

const (
	// ModeHybrid decides per call from measured costs: spin, block, or sleep
	// until just before the predicted completion and then spin.
	ModeHybrid Mode = iota
	// ModePaper is Algorithm 1 of the reference paper as published: poll for
	// the kernel's average time when it is under max_threshold, then block.
	ModePaper
	// ModeSpin polls until complete.
	ModeSpin
	// ModeYield polls, yielding the CPU between polls.
	ModeYield
	// ModeBlock sleeps in the device's blocking wait.
	ModeBlock
	// ModeCUDAAuto leaves the wait to the device's default behaviour.
	ModeCUDAAuto
)

var modeNames = [...]string{"hybrid", "paper", "spin", "yield", "block", "cuda-auto"}

// Modes lists every mode by name, default first.
func Modes() []string { return append([]string(nil), modeNames[:]...) }

func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses a mode name as Modes lists them.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown mode %q (want one of %v)", s, modeNames)
}

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	*m = v
	return err
}
