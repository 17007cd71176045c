package workload

import (
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// DefaultModes are the wait modes `run` and `bench` compare unless told
// otherwise: hybridsync's policies, the default first; cuda-auto is left
// out, it leaves the wait to the device.
var DefaultModes = []hybridsync.Mode{hybridsync.ModeHybrid, hybridsync.ModePaper, hybridsync.ModeSpin, hybridsync.ModeYield, hybridsync.ModeBlock}

// ModeNames returns the names of modes, as a flag lists them.
func ModeNames(modes []hybridsync.Mode) []string {
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = m.String()
	}
	return names
}

// ParseModes parses mode names, once, where they come in; what runs
// them gets hybridsync.Mode values.
func ParseModes(names []string) ([]hybridsync.Mode, error) {
	modes := make([]hybridsync.Mode, len(names))
	for i, n := range names {
		m, err := hybridsync.ParseMode(n)
		if err != nil {
			return nil, err
		}
		modes[i] = m
	}
	return modes, nil
}
