package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// ErrNewerVersion means an input was written by a newer vgpu-probe.
var ErrNewerVersion = errors.New("written by a newer vgpu-probe")

// ReadStats reads a HYBRIDSYNC_STATS file with one-line errors.
func ReadStats(path string) (StatsInput, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return StatsInput{}, err
	}
	var s hybridsync.Stats
	if err := json.Unmarshal(b, &s); err != nil {
		return StatsInput{}, fmt.Errorf("%s: not a hybridsync stats file: %w", path, err)
	}
	if s.Version > hybridsync.StatsVersion {
		return StatsInput{}, fmt.Errorf("%s: stats format version %d: %w (this one reads up to %d)", path, s.Version, ErrNewerVersion, hybridsync.StatsVersion)
	}
	if s.Version < 1 || s.Mode == "" {
		return StatsInput{}, fmt.Errorf("%s: not a hybridsync stats file (no version or mode)", path)
	}
	return StatsInput{Path: path, Stats: s}, nil
}
