// Package results is the format of `vgpu-probe run` results (results.json):
// what the experiment runner writes and the profiler reads. It is a
// contract between the two: add fields freely, but a change in meaning
// bumps Version.
package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/workload"
)

// Version is the format version this build writes and the newest it reads.
const Version = 1

// ErrNewerVersion means the file was written by a newer vgpu-probe.
var ErrNewerVersion = errors.New("results written by a newer vgpu-probe")

// File is one results.json.
type File struct {
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	Cells   []Cell    `json:"cells"`
}

// Machine describes where the run happened.
type Machine struct {
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	Kernel   string `json:"kernel"`
	GPU      string `json:"gpu,omitempty"`
}

// Config is the run's matrix as asked for.
type Config struct {
	Backend   string   `json:"backend"` // local, libvirt
	Scenarios []string `json:"scenarios"`
	Corunner  string   `json:"corunner"`
	Corunners []int    `json:"corunners"`
	VCPUs     []int    `json:"vcpus"`
	Modes     []string `json:"modes"`
	Device    string   `json:"device"`
	Workload  string   `json:"workload"` // "namd-like" or the command
	Reps      int      `json:"reps"`
	Steps     int      `json:"steps"`
	HostUS    float64  `json:"host_us"`
	KernelUS  float64  `json:"kernel_us"`
	Profile   string   `json:"profile,omitempty"`
	// PeriodUS is the CPU bandwidth period of shared2's quotas.
	PeriodUS int64 `json:"period_us,omitempty"`
	// Hints: the runner's waits read the host's hint page (run --hints).
	Hints bool `json:"hints,omitempty"`
	// Notes says what the run changed from what was asked, and why
	// (e.g. shared2 skipped without the rights to create cgroups).
	Notes []string `json:"notes,omitempty"`
}

// Key identifies a cell of the matrix.
type Key struct {
	Scenario  string `json:"scenario"` // shared1, shared2, baseline
	Corunner  string `json:"corunner"` // while1, matmul, stream, a command; "" in baseline
	Corunners int    `json:"corunners"`
	VCPUs     int    `json:"vcpus"`
	Mode      string `json:"mode"`
}

// Cell is one finished cell.
type Cell struct {
	Key
	Reps     []workload.Result `json:"reps"`   // each repetition, timelines dropped
	Median   workload.Result   `json:"median"` // field-wise median of Reps
	MinWallS float64           `json:"min_wall_s"`
	MaxWallS float64           `json:"max_wall_s"`
	// RunnerVCPUs is how many vCPUs the GPU runner had: VCPUs, or half of
	// it (at least one) in the baseline.
	RunnerVCPUs int `json:"runner_vcpus,omitempty"`
	// QuotaCPUs is the CPU bandwidth each VM was limited to, in CPUs
	// (shared2); 0 when unlimited.
	QuotaCPUs float64 `json:"quota_cpus,omitempty"`
	// KernelsPerS is kernels per second of the median run: steps x the
	// runner's vCPUs (each vCPU launches one kernel per step) / wall time.
	KernelsPerS float64 `json:"kernels_per_s"`
	// Slowdown is the median wall time over the baseline cell's with the
	// same mode and vCPU count; 0 when there is no such baseline.
	Slowdown float64 `json:"slowdown"`
	// Timeline is a window of the median run: per step, and with the
	// agent, the runner's and co-runners' on/off-CPU intervals.
	Timeline *Timeline `json:"timeline,omitempty"`
	// Agent is the agent's per-thread discontinuity snapshot for the cell
	// (the JSON of `vgpu-probe agent --once --json`), when it ran.
	Agent json.RawMessage `json:"agent,omitempty"`
	// AgentError says why Agent is missing when the agent was asked for.
	AgentError string `json:"agent_error,omitempty"`
	// AgentWallS is the wall time of the extra run the agent watched (not
	// one of Reps: tracing costs CPU the measured runs must not pay).
	AgentWallS float64 `json:"agent_wall_s,omitempty"`
}

// Timeline is what the profiler draws for a cell.
type Timeline struct {
	Steps   []workload.Step `json:"steps"`
	Threads []ThreadTrack   `json:"threads,omitempty"`
}

// ThreadTrack is one thread's on/off-CPU intervals, ns since the run's start.
type ThreadTrack struct {
	Name      string     `json:"name"` // e.g. "runner vcpu0", "corunner1 vcpu0"
	TID       int        `json:"tid"`
	Intervals []Interval `json:"intervals"`
}

// Interval is a span during which a thread was on (or off) the CPU.
type Interval struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	On    bool  `json:"on"`
}

// Read parses a results file with one-line errors for a person to act on.
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: not a results file: %w", path, err)
	}
	if f.Version > Version {
		return nil, fmt.Errorf("%s: format version %d: %w (this one reads up to %d)", path, f.Version, ErrNewerVersion, Version)
	}
	if f.Version < 1 {
		return nil, fmt.Errorf("%s: not a results file (no version)", path)
	}
	return &f, nil
}

// Write stores f at path atomically: a temporary file in the same
// directory, renamed over path, so a reader or a crash never sees half a
// file and results already written are never lost.
func Write(path string, f *File) error {
	f.Version = Version
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(path, b)
}

// WriteAtomic writes data to path through a temporary file and a rename.
func WriteAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
