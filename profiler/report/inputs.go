package report

import (
	"context"
	"errors"
	"fmt"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/input"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// ErrNewerVersion means an input was written by a newer vgpu-probe.
var ErrNewerVersion = errors.New("written by a newer vgpu-probe")

// ReadStats reads a HYBRIDSYNC_STATS file with one-line errors. Only a
// regular file of at most input.MaxBytes is read.
func ReadStats(path string) (StatsInput, error) {
	b, err := input.ReadFile(context.Background(), path)
	if err != nil {
		return StatsInput{}, err
	}
	return ParseStats(path, b)
}

// ParseStats decodes a HYBRIDSYNC_STATS file's bytes (name is what errors
// and the report call it) and checks its values.
func ParseStats(name string, b []byte) (StatsInput, error) {
	var s hybridsync.Stats
	check := func() error {
		if s.Mode == "" {
			return fmt.Errorf("not %s (%s)", statsFormat.File, statsFormat.Unnamed)
		}
		return checkStats(&s)
	}
	if err := statsFormat.Decode(name, b, &s, func() int { return s.Version }, check); err != nil {
		return StatsInput{}, err
	}
	return StatsInput{Path: name, Stats: s}, nil
}

var statsFormat = input.Format{File: "a hybridsync stats file", Version: "stats format version",
	Newest: hybridsync.StatsVersion, Newer: ErrNewerVersion, Unnamed: "no version or mode"}

// ParseResults decodes a results file's bytes (results.Parse) and checks
// the agent snapshots its cells carry, which the report ranks like a live
// agent's.
func ParseResults(name string, b []byte) (ResultsInput, error) {
	f, err := results.Parse(name, b)
	if err != nil {
		return ResultsInput{}, err
	}
	for i, c := range f.Cells {
		if len(c.Agent) == 0 {
			continue
		}
		at := fmt.Sprintf("cells[%d].agent", i)
		s, err := agentapi.ParseSnapshot(c.Agent)
		if err != nil {
			return ResultsInput{}, fmt.Errorf("%s: %s: %w", name, at, err)
		}
		var chk input.Check
		checkSnapshot(&chk, at+".", s)
		if err := chk.Err(); err != nil {
			return ResultsInput{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	return ResultsInput{Path: name, File: f}, nil
}

// CheckSnapshot checks the values of an agent's snapshot: times and rates
// that cannot be negative, a steal fraction between 0 and 1.
func CheckSnapshot(s *agentapi.Snapshot) error {
	var c input.Check
	checkSnapshot(&c, "", s)
	return c.Err()
}
