package nvml

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/vgpu-probe/vgpu-probe/experiments/results"
)

// ErrNewerVersion means a Series file was written by a newer vgpu-probe.
var ErrNewerVersion = errors.New("written by a newer vgpu-probe")

// ReadSeries reads a Series file written by WriteSeries (or by anything
// that marshals a Series), with one-line errors.
func ReadSeries(path string) (*Series, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Series
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: not an NVML samples file: %w", path, err)
	}
	if s.Version > SeriesVersion {
		return nil, fmt.Errorf("%s: NVML samples format version %d: %w (this one reads up to %d)", path, s.Version, ErrNewerVersion, SeriesVersion)
	}
	if s.Version < 1 {
		return nil, fmt.Errorf("%s: not an NVML samples file (no version)", path)
	}
	return &s, nil
}

// WriteSeries stores s at path atomically (a temporary file renamed over
// path), stamped with SeriesVersion.
func WriteSeries(path string, s Series) error {
	s.Version = SeriesVersion
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return results.WriteAtomic(path, b)
}
