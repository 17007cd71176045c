// Package results is the format of the results document (results.json)
// that `vgpu-probe run`, `bench` and `apps` write and `vgpu-probe report`
// reads. It is a contract between them: add fields freely, but a change in
// meaning bumps Version.
package results

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vgpu-probe/vgpu-probe/input"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Version is the format version this build writes and the newest it reads.
const Version = 1

// ErrNewerVersion means the file was written by a newer vgpu-probe.
var ErrNewerVersion = errors.New("results written by a newer vgpu-probe")

// File is one results.json.
type File struct {
	Version int `json:"version"`
	// Kind is the command that wrote it: KindRun ("" in files of older
	// builds), KindBench or KindApps.
	Kind    string    `json:"kind,omitempty"`
	Created time.Time `json:"created"`
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	Cells   []Cell    `json:"cells"`
	// Bench and Apps are what a command adds beside the cells, in
	// results.json and in what --json prints alike: bench's table as it
	// prints it, and apps' and advise's runs with their table (which
	// vgpu-probe report computes again from the runs).
	Bench *BenchPart        `json:"bench,omitempty"`
	Apps  *apptable.Summary `json:"apps,omitempty"`
}

// BenchPart is bench's part of its results document.
type BenchPart struct {
	Rows []BenchRow `json:"results"`
	// Interrupted: a signal ended the run; Rows are the cells that
	// finished every repetition before it.
	Interrupted bool `json:"interrupted,omitempty"`
}

// BenchRow is one cell of bench's table: medians over its repetitions.
type BenchRow struct {
	Contention   string  `json:"contention"`
	Mode         string  `json:"mode"`
	Threshold    string  `json:"threshold"`
	WallS        float64 `json:"wall_s"`
	CPUS         float64 `json:"cpu_s"`
	Steps        int     `json:"steps"`
	ReceiveP50US float64 `json:"receive_p50_us"`
	ReceiveP99US float64 `json:"receive_p99_us"`
	LaunchP50US  float64 `json:"launch_p50_us"`
	LaunchP99US  float64 `json:"launch_p99_us"`
	// CorunnerShare is the busy-loop co-runner's CPU time over the cell's
	// wall time (median over repetitions), where the setting has one: 0.5
	// is a fair share, less is what the program (or a mitigation) took.
	CorunnerShare float64 `json:"corunner_cpu_share,omitempty"`
	// Reps are the repetitions, which the cells keep.
	Reps []Result `json:"-"`
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
	// Device, Steps, HostUS and KernelUS configure the built-in loop;
	// "" or 0, and left out, where a command or program is measured.
	Device   string  `json:"device,omitempty"`
	Workload string  `json:"workload"` // "namd-like" or the command
	Reps     int     `json:"reps"`
	Steps    int     `json:"steps,omitempty"`
	HostUS   float64 `json:"host_us,omitempty"`
	KernelUS float64 `json:"kernel_us,omitempty"`
	Profile  string  `json:"profile,omitempty"`
	// PeriodUS is the CPU bandwidth period of shared2's quotas.
	PeriodUS int64 `json:"period_us,omitempty"`
	// Hints: the runner's waits read the host's hint page (run --hints).
	Hints bool `json:"hints,omitempty"`
	// PerStep: cells are compared by their wall time per step, not by
	// their wall time (apps: a program run for --seconds does as many
	// steps as fit, so its wall time is about the same in every arm).
	PerStep bool `json:"per_step,omitempty"`
	// Mitigate is run --mitigate (e.g. "slice=100us"): the runner's
	// threads had a short EEVDF slice; "" none.
	Mitigate string `json:"mitigate,omitempty"`
	// Notes says what the run changed from what was asked, and why
	// (e.g. shared2 skipped without the rights to create cgroups).
	Notes []string `json:"notes,omitempty"`
}

// Key identifies a cell of the matrix.
type Key struct {
	// Program is the measured program where a file holds several
	// (apps); "" for run's and bench's single workload.
	Program string `json:"program,omitempty"`
	// Scenario is run's shared1, shared2 or baseline, or bench's and
	// apps' contention setting (none, while1, cap, cap+while1).
	Scenario  string `json:"scenario"`
	Corunner  string `json:"corunner"` // while1, matmul, stream, a command; "" alone
	Corunners int    `json:"corunners"`
	VCPUs     int    `json:"vcpus"`
	Mode      string `json:"mode"` // run's and bench's wait mode, apps' arm
	// Threshold is where bench's waits got the remaining time slice
	// (guest, static, hints); "" elsewhere.
	Threshold string `json:"threshold,omitempty"`
}

// Cell is one finished cell.
type Cell struct {
	Key
	Reps     []Result `json:"reps"`   // each repetition, timelines dropped
	Median   Result   `json:"median"` // field-wise median of Reps
	MinWallS float64  `json:"min_wall_s"`
	MaxWallS float64  `json:"max_wall_s"`
	// RunnerVCPUs is how many vCPUs the GPU runner had: VCPUs, or half of
	// it (at least one) in the baseline.
	RunnerVCPUs int `json:"runner_vcpus,omitempty"`
	// QuotaCPUs is the CPU bandwidth each VM was limited to, in CPUs
	// (shared2); 0 when unlimited.
	QuotaCPUs float64 `json:"quota_cpus,omitempty"`
	// KernelsPerS is kernels per second of the median run: steps x the
	// runner's vCPUs (each vCPU launches one kernel per step) / wall time;
	// 0, and left out, where no kernels were counted (apps, a command).
	KernelsPerS float64 `json:"kernels_per_s,omitempty"`
	// Slowdown is the cell's median time over its reference's: the
	// fastest cell, any mode, of the reference scenario (File.Reference)
	// with the same vCPU count and program (results/compare); 0, and left
	// out, when there is none.
	Slowdown float64 `json:"slowdown,omitempty"`
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
	Steps   []Step        `json:"steps"`
	Threads []ThreadTrack `json:"threads,omitempty"`
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
// Only a regular file of at most input.MaxBytes is read.
func Read(path string) (*File, error) {
	b, err := input.ReadFile(context.Background(), path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse decodes a results file's bytes (name is what errors call it) and
// checks its numbers: a time that is not positive, a slowdown below zero
// or a value no measurement reaches is an error naming the field.
func Parse(name string, b []byte) (*File, error) {
	var f File
	if err := format.Decode(name, b, &f, func() int { return f.Version }, f.check); err != nil {
		return nil, err
	}
	return &f, nil
}

var format = input.Format{File: "a results file", Version: "format version", Newest: Version, Newer: ErrNewerVersion}

func (f *File) check() error {
	var c input.Check
	if f.Kind != "" && ReferenceScenario(f.Kind) == "" {
		c.Failf("kind %q: want %s, %s or %s", f.Kind, KindRun, KindBench, KindApps)
	}
	c.Count("machine.cpus", f.Machine.CPUs)
	c.Count("config.reps", f.Config.Reps)
	c.Range("config.steps", float64(f.Config.Steps), 0, math.MaxInt)
	c.Range("config.host_us", f.Config.HostUS, 0, input.MaxUS)
	c.Range("config.kernel_us", f.Config.KernelUS, 0, input.MaxUS)
	c.Range("config.period_us", float64(f.Config.PeriodUS), 0, input.MaxUS)
	if len(f.Cells) == 0 {
		// Writers write no document before their first cell; one without
		// cells is from a run that failed or was stopped before it, and
		// must not read as a result.
		c.Failf("no cells: the run that wrote it ended before its first cell (it failed or was stopped)")
	}
	for i := range f.Cells {
		f.Cells[i].check(&c, fmt.Sprintf("cells[%d]", i))
	}
	return c.Err()
}

func (cell *Cell) check(c *input.Check, at string) {
	c.Count(at+".corunners", cell.Corunners)
	c.Count(at+".vcpus", cell.VCPUs)
	c.Count(at+".runner_vcpus", cell.RunnerVCPUs)
	checkResult(c, at+".median", cell.Median)
	for j, r := range cell.Reps {
		checkResult(c, fmt.Sprintf("%s.reps[%d]", at, j), r)
	}
	c.Positive(at+".min_wall_s", cell.MinWallS, input.MaxSeconds)
	c.Positive(at+".max_wall_s", cell.MaxWallS, input.MaxSeconds)
	if cell.MinWallS > cell.MaxWallS {
		c.Failf("%s: min_wall_s = %g is more than max_wall_s = %g", at, cell.MinWallS, cell.MaxWallS)
	}
	c.Range(at+".kernels_per_s", cell.KernelsPerS, 0, input.MaxRate)
	// 0: no baseline to compare with.
	c.Range(at+".slowdown", cell.Slowdown, 0, input.MaxRatio)
	c.Range(at+".quota_cpus", cell.QuotaCPUs, 0, input.MaxCount)
	c.Range(at+".agent_wall_s", cell.AgentWallS, 0, input.MaxSeconds)
}

// checkResult checks one run: it took time, and its latencies are times.
func checkResult(c *input.Check, at string, r Result) {
	c.Positive(at+".wall_s", r.WallS, input.MaxSeconds)
	c.Range(at+".cpu_s", r.CPUS, 0, input.MaxSeconds)
	c.Range(at+".steps", float64(r.Steps), 0, math.MaxInt)
	c.Range(at+".launch_p50_us", r.LaunchP50US, 0, input.MaxUS)
	c.Range(at+".launch_p99_us", r.LaunchP99US, 0, input.MaxUS)
	c.Range(at+".receive_p50_us", r.ReceiveP50US, 0, input.MaxUS)
	c.Range(at+".receive_p99_us", r.ReceiveP99US, 0, input.MaxUS)
}

// Write stores f at path with WriteAtomic: a reader or a crash never sees
// half a file, and results already written are never lost.
func Write(path string, f *File) error {
	f.Version = Version
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(path, b)
}
