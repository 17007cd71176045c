package nvml

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/vgpu-probe/vgpu-probe/input"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// ErrNewerVersion means a Series file was written by a newer vgpu-probe.
var ErrNewerVersion = errors.New("written by a newer vgpu-probe")

// ReadSeries reads a Series file written by WriteSeries (or by anything
// that marshals a Series), with one-line errors. Only a regular file of at
// most input.MaxBytes is read.
func ReadSeries(path string) (*Series, error) {
	b, err := input.ReadFile(context.Background(), path)
	if err != nil {
		return nil, err
	}
	return ParseSeries(path, b)
}

// ParseSeries decodes a Series file's bytes (name is what errors call it)
// and checks its values: a percentage over 100, more memory used than the
// GPU has, or a sampling interval that is not a time is an error naming
// the field.
func ParseSeries(name string, b []byte) (*Series, error) {
	var s Series
	if err := seriesFormat.Decode(name, b, &s, func() int { return s.Version }, s.check); err != nil {
		return nil, err
	}
	return &s, nil
}

var seriesFormat = input.Format{File: "an NVML samples file", Version: "NVML samples format version",
	Newest: SeriesVersion, Newer: ErrNewerVersion}

func (s *Series) check() error {
	var c input.Check
	c.Positive("interval_s", s.IntervalS, input.MaxSeconds)
	c.Range("dropped", float64(s.Dropped), 0, math.MaxInt)
	for i, x := range s.Samples {
		at := fmt.Sprintf("samples[%d]", i)
		c.Count(at+".gpu", x.GPU)
		c.Range(at+".util_pct", float64(x.UtilPct), 0, 100)
		c.Range(at+".mem_util_pct", float64(x.MemUtilPct), 0, 100)
		if x.MemTotalBytes > 0 && x.MemUsedBytes > x.MemTotalBytes {
			c.Failf("%s: mem_used_bytes = %d is more than mem_total_bytes = %d", at, x.MemUsedBytes, x.MemTotalBytes)
		}
		for j, p := range x.Processes {
			c.Range(fmt.Sprintf("%s.processes[%d].sm_pct", at, j), float64(p.SMPct), 0, 100)
			c.Range(fmt.Sprintf("%s.processes[%d].mem_pct", at, j), float64(p.MemPct), 0, 100)
		}
	}
	return c.Err()
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
