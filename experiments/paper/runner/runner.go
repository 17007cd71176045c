// Package runner runs an experiment's matrix on a backend: every group of
// cells (one configuration of VMs) is created once, its cells are measured
// --reps times with the modes interleaved, and the finished cells are
// written to results.json atomically before the next group starts. An
// interrupted run keeps every group that finished and can be resumed; the
// VMs of the group in progress are destroyed on the way out, whatever the
// reason (Ctrl-C, a failure, a panic in a measurement).
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/scenario"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// ResultsName is the file the runner writes in its output directory.
const ResultsName = results.Name

// AgentRun is what the agent saw of one run of a cell.
type AgentRun struct {
	// Snapshot is the agent's JSON snapshot of the runner's and the
	// co-runners' threads.
	Snapshot json.RawMessage
	// Tracks are on/off-CPU intervals per thread, in CLOCK_MONOTONIC ns
	// (the runner makes them relative to the run's start).
	Tracks []results.ThreadTrack
}

// AgentFunc watches the runner's process and the co-runners' while the
// runner's loop runs. It calls ready once it watches them all (the runner
// is held at its start line until then, or until AgentStartTimeout, so
// that a short loop is not over before the agent has begun), and collects
// what it saw once done is closed (the runner's process is then still
// alive, held at its finish line, until AgentFunc returns).
type AgentFunc func(ctx context.Context, runner int, corunners []int, ready func(), done <-chan struct{}) (AgentRun, error)

// AgentStartTimeout is how long a runner waits for the agent to be ready.
const AgentStartTimeout = 5 * time.Second

// Progress is told about the measurements as they happen.
type Progress interface {
	Begin(total int)  // total measurements this run will make
	Next(desc string) // one starts
	Advance()         // one finished
	Note(msg string)  // something the user should know (a skip)
}

// Options is one experiment.
type Options struct {
	Backend  backend.Backend
	Matrix   scenario.Matrix
	Load     backend.Load     // what the co-runner VMs run
	Workload backend.Workload // the runner's workload; Mode is set per cell
	// HostWork is the host work per step of the built-in loop; the runner
	// calibrates it into Workload.Config.Work on the runner's CPU before
	// any co-runner starts. Ignored for a command workload.
	HostWork time.Duration
	Reps     int
	Period   time.Duration // CPU bandwidth period of shared2's quotas
	// CPUs are the CPUs the VMs may use; a group with v vCPUs shares the
	// last v of them (CPU 0 takes most interrupts). Nil: all this process
	// may use.
	CPUs []int
	// OutDir receives results.json; "" writes nothing.
	OutDir string
	// Resume keeps the cells already in OutDir's results.json and runs
	// only the rest; without it an existing file is an error.
	Resume bool
	// Agent, when set, watches the runner and co-runners during one extra,
	// uncounted run of each cell.
	Agent AgentFunc
	// TimelineSteps is the window of steps (per vCPU) of the median run
	// kept per cell; 0 keeps none.
	TimelineSteps int
	// Config is recorded in the results as the matrix asked for.
	Config   results.Config
	Progress Progress
}

// ErrExists means the output directory has results and Resume was not set.
var ErrExists = errors.New("results exist")

// CheckOut reports whether a run with these settings may write to dir:
// without resume an existing results file must not be overwritten; with
// resume it must be readable and made with the same workload.
func CheckOut(dir string, resume bool, cfg results.Config) error {
	path := filepath.Join(dir, ResultsName)
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !resume:
		return fmt.Errorf("%s: %w (use --resume to continue it, or another --out)", path, ErrExists)
	}
	f, err := results.Read(path)
	if err != nil {
		return err
	}
	return sameWorkload(f.Config, cfg, path)
}

// sameWorkload: cells measured with another workload or device are not
// comparable with new ones, so resuming into them is refused.
func sameWorkload(old, cfg results.Config, path string) error {
	type w struct {
		backend, corunner, device, workload string
		steps                               int
		host, kernel                        float64
		profile                             string
		hints                               bool
		mitigate                            string
	}
	a := w{old.Backend, old.Corunner, old.Device, old.Workload, old.Steps, old.HostUS, old.KernelUS, old.Profile, old.Hints, old.Mitigate}
	b := w{cfg.Backend, cfg.Corunner, cfg.Device, cfg.Workload, cfg.Steps, cfg.HostUS, cfg.KernelUS, cfg.Profile, cfg.Hints, cfg.Mitigate}
	if a != b {
		return fmt.Errorf("%s was made with another workload, co-runner, backend, hint or mitigation setting (%+v, now %+v): resume into another --out", path, a, b)
	}
	return nil
}

// Run runs the experiment and returns the results (also those resumed).
// On cancellation or failure it returns the error with the results of
// every group that finished, which are also in OutDir (where none
// finished, OutDir has no results file).
func Run(ctx context.Context, o Options) (*results.File, error) {
	if o.Reps <= 0 {
		return nil, fmt.Errorf("reps must be positive")
	}
	if o.Progress == nil {
		o.Progress = nopProgress{}
	}
	cpus := o.CPUs
	if cpus == nil {
		var err error
		if cpus, err = corunner.Online(); err != nil {
			return nil, err
		}
	}
	if err := o.Matrix.Validate(len(cpus)); err != nil {
		return nil, err
	}
	f, err := o.start()
	if err != nil {
		return nil, err
	}
	done := map[results.Key]bool{}
	for _, c := range f.Cells {
		done[c.Key] = true
	}
	// Plan: the groups with cells still to measure, minus those the
	// backend cannot isolate.
	var plan []scenario.Group
	var noIso error
	if ic, ok := o.Backend.(backend.IsolationChecker); ok {
		noIso = ic.CanIsolate()
	}
	skipped := false
	for _, g := range o.Matrix.Groups() {
		g.Cells = slices.DeleteFunc(g.Cells, func(c scenario.Cell) bool { return done[c.Key] })
		if len(g.Cells) == 0 {
			continue
		}
		if g.Scenario.Isolation && noIso != nil {
			skipped = true
			continue
		}
		plan = append(plan, g)
	}
	if skipped {
		note := fmt.Sprintf("%s skipped: %v", scenario.Shared2, noIso)
		f.Config.Notes = append(f.Config.Notes, note)
		o.Progress.Note(note)
	}
	total := 0
	for _, g := range plan {
		total += len(g.Cells) * o.Reps
		if o.Agent != nil {
			total += len(g.Cells)
		}
	}
	o.Progress.Begin(total)
	if o.Workload.Cmd == "" && len(plan) > 0 {
		// Calibrated alone, on a CPU the runner will use, before any
		// co-runner exists: the work is a fixed amount of CPU.
		o.Workload.Config.Work = workload.CalibrateOn(cpus[len(cpus)-1], o.HostWork)
	}
	// The results file is written after each group, never before the
	// first: a run that fails before any cell leaves none that would read
	// as a result.
	for _, g := range plan {
		cells, err := o.runGroup(ctx, g, cpus)
		if err != nil {
			return f, err
		}
		f.Cells = append(f.Cells, cells...)
		compare.SetSlowdowns(f)
		if err := o.write(f); err != nil {
			return f, err
		}
	}
	return f, nil
}

// start returns the results file to add to: the one in OutDir when
// resuming, else a new one.
func (o *Options) start() (*results.File, error) {
	if o.OutDir != "" {
		if _, err := results.OutDir(o.OutDir, results.KindRun, time.Now()); err != nil {
			return nil, err
		}
		if err := CheckOut(o.OutDir, o.Resume, o.Config); err != nil {
			return nil, err
		}
		if o.Resume {
			f, err := results.Read(filepath.Join(o.OutDir, ResultsName))
			if err == nil {
				// The file's matrix is every cell it holds: the old
				// matrix and the new one together.
				c := &f.Config
				c.Scenarios, c.Modes = union(c.Scenarios, o.Config.Scenarios), union(c.Modes, o.Config.Modes)
				c.VCPUs, c.Corunners = union(c.VCPUs, o.Config.VCPUs), union(c.Corunners, o.Config.Corunners)
				c.Reps = max(c.Reps, o.Config.Reps)
				c.Notes = append(c.Notes, "resumed "+time.Now().UTC().Format(time.RFC3339))
				return f, nil
			}
			if !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	return &results.File{Version: results.Version, Kind: results.KindRun, Created: time.Now().UTC(), Machine: results.ThisMachine(), Config: o.Config}, nil
}

func (o *Options) write(f *results.File) error {
	if o.OutDir == "" {
		return nil
	}
	_, err := results.WriteDoc(o.OutDir, f)
	return err
}

func union[T comparable](a, b []T) []T {
	out := slices.Clone(a)
	for _, v := range b {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// Topology returns the VMs of group g on cpus: the shared set is the last
// VCPUs of cpus; the baseline runner has half of them, alone.
func Topology(g scenario.Group, cpus []int, period time.Duration) backend.Topology {
	shared := cpus[len(cpus)-g.VCPUs:]
	t := backend.Topology{Runner: backend.VM{Name: "runner", CPUs: shared[:g.RunnerVCPUs()]}, Period: period}
	for i := range g.Corunners {
		t.Corunners = append(t.Corunners, backend.VM{Name: fmt.Sprintf("corunner%d", i+1), CPUs: shared})
	}
	if g.Scenario.Isolation {
		share := scenario.FairShare(g.VCPUs, g.Corunners)
		t.Runner.QuotaCPUs = share
		for i := range t.Corunners {
			t.Corunners[i].QuotaCPUs = share
		}
	}
	return t
}

// runGroup creates g's VMs, measures its cells and destroys the VMs.
func (o *Options) runGroup(ctx context.Context, g scenario.Group, cpus []int) (_ []results.Cell, err error) {
	topo := Topology(g, cpus, o.Period)
	env, err := o.Backend.Create(ctx, topo, o.Load)
	if err != nil {
		return nil, fmt.Errorf("%s, %d vCPUs, %d co-runners: %w", g.Scenario.Name, g.VCPUs, g.Corunners, err)
	}
	defer func() {
		if derr := env.Destroy(); derr != nil && err == nil {
			err = fmt.Errorf("clean up: %w", derr)
		}
	}()
	type acc struct {
		reps     []results.Result
		agent    *AgentRun
		agentRun results.Result // the run the agent watched
		agentErr string
	}
	accs := make([]acc, len(g.Cells))
	// Modes interleave within each repetition, so that a slow patch of
	// the machine hits every mode alike.
	for rep := range o.Reps {
		for i, c := range g.Cells {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			o.Progress.Next(describe(c.Key, rep, o.Reps))
			r, err := env.Run(ctx, o.workloadFor(c), nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", describe(c.Key, rep, o.Reps), err)
			}
			accs[i].reps = append(accs[i].reps, r)
			o.Progress.Advance()
		}
	}
	// The agent watches one more run of each cell, not counted in the
	// cell's repetitions: its tracing costs CPU that the measured runs
	// must not pay.
	for i, c := range g.Cells {
		if o.Agent == nil {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o.Progress.Next(describe(c.Key, -1, o.Reps))
		a := &accs[i]
		r, run, err := o.withAgent(ctx, env, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", describe(c.Key, -1, o.Reps), err)
		}
		a.agentRun = r
		if run.err != nil {
			a.agentErr = run.err.Error()
		} else {
			a.agent = &run.AgentRun
		}
		o.Progress.Advance()
	}
	cells := make([]results.Cell, len(g.Cells))
	for i, gc := range g.Cells {
		k := gc.Key
		a := accs[i]
		med := workload.Median(a.reps)
		c := results.Cell{Key: k, Median: med, RunnerVCPUs: g.RunnerVCPUs(), QuotaCPUs: topo.Runner.QuotaCPUs,
			AgentError: a.agentErr, AgentWallS: a.agentRun.WallS}
		c.MinWallS, c.MaxWallS = a.reps[0].WallS, a.reps[0].WallS
		for _, r := range a.reps {
			c.MinWallS, c.MaxWallS = min(c.MinWallS, r.WallS), max(c.MaxWallS, r.WallS)
			r.Timeline = nil
			c.Reps = append(c.Reps, r)
		}
		if med.WallS > 0 && med.Steps > 0 {
			c.KernelsPerS = float64(med.Steps*g.RunnerVCPUs()) / med.WallS
		}
		if tl := window(med.Timeline, o.TimelineSteps*g.RunnerVCPUs()); len(tl) > 0 {
			c.Timeline = &results.Timeline{Steps: tl}
		}
		if a.agent != nil {
			c.Agent = a.agent.Snapshot
			// The timeline the agent saw: its run's steps beside the
			// threads' on/off-CPU intervals over the same window.
			if tl := window(a.agentRun.Timeline, o.TimelineSteps*g.RunnerVCPUs()); len(tl) > 0 {
				c.Timeline = &results.Timeline{Steps: tl, Threads: nameVCPUs(clipTracks(a.agent.Tracks, a.agentRun.StartNs, tl), a.agentRun.TIDs)}
			}
		}
		c.Median.Timeline = nil
		cells[i] = c
	}
	return cells, nil
}

// workloadFor is the runner's workload for cell c.
func (o *Options) workloadFor(c scenario.Cell) backend.Workload {
	w := o.Workload
	w.Mode = c.Mode
	w.Config.Timeline = o.TimelineSteps > 0
	return w
}

// agentResult is an AgentFunc's answer; err is the agent's failure, which
// does not fail the run.
type agentResult struct {
	AgentRun
	err error
}

// withAgent runs cell c once with the agent watching the runner and the
// co-runners: the runner waits at its start line until the agent is
// ready, and at its finish line until the agent has collected.
func (o *Options) withAgent(ctx context.Context, env backend.Env, c scenario.Cell) (results.Result, agentResult, error) {
	var res agentResult
	agentDone := make(chan struct{})
	loopDone := make(chan struct{})
	var closeLoop sync.Once
	endLoop := func() { closeLoop.Do(func() { close(loopDone) }) }
	started := false
	w := o.workloadFor(c)
	if w.Cmd == "" {
		w.Hold = func() { endLoop(); <-agentDone }
	}
	r, err := env.Run(ctx, w, func(pid int) {
		started = true
		readyCh := make(chan struct{})
		var once sync.Once
		ready := func() { once.Do(func() { close(readyCh) }) }
		go func() {
			defer close(agentDone)
			defer ready() // an agent that failed releases the runner too
			res.AgentRun, res.err = o.Agent(ctx, pid, env.Corunners(), ready, loopDone)
		}()
		select {
		case <-readyCh:
		case <-ctx.Done():
		case <-time.After(AgentStartTimeout):
		}
	})
	endLoop() // a command workload, or a run that failed before its end
	if started {
		<-agentDone
	}
	return r, res, err
}

// nameVCPUs names the tracks of the runner's loop threads "runner vcpuI"
// (tids[i] is vCPU i's thread) and puts them first, in vCPU order.
func nameVCPUs(tracks []results.ThreadTrack, tids []int) []results.ThreadTrack {
	vcpu := func(t results.ThreadTrack) int {
		if i := slices.Index(tids, t.TID); i >= 0 {
			return i
		}
		return len(tids)
	}
	for i := range tracks {
		if v := vcpu(tracks[i]); v < len(tids) {
			tracks[i].Name = fmt.Sprintf("runner vcpu%d", v)
		}
	}
	slices.SortStableFunc(tracks, func(a, b results.ThreadTrack) int { return vcpu(a) - vcpu(b) })
	return tracks
}

// clipTracks makes the tracks' times relative to start (CLOCK_MONOTONIC ns
// of the run's start) and keeps the intervals that overlap the steps'
// window, cut to it.
func clipTracks(tracks []results.ThreadTrack, start int64, steps []results.Step) []results.ThreadTrack {
	if start == 0 || len(steps) == 0 {
		return nil
	}
	lo, hi := steps[0].HostStart, steps[0].Noticed
	for _, s := range steps {
		lo, hi = min(lo, s.HostStart), max(hi, s.Noticed)
	}
	var out []results.ThreadTrack
	for _, t := range tracks {
		c := results.ThreadTrack{Name: t.Name, TID: t.TID}
		for _, iv := range t.Intervals {
			a, b := max(iv.Start-start, lo), min(iv.End-start, hi)
			if a < b {
				c.Intervals = append(c.Intervals, results.Interval{Start: a, End: b, On: iv.On})
			}
		}
		if len(c.Intervals) > 0 {
			out = append(out, c)
		}
	}
	return out
}

func describe(k results.Key, rep, reps int) string {
	s := fmt.Sprintf("%s %dv", k.Scenario, k.VCPUs)
	if k.Corunners > 0 {
		s += fmt.Sprintf(" %dx%s", k.Corunners, k.Corunner)
	}
	if rep < 0 {
		return fmt.Sprintf("%s %s with agent", s, k.Mode)
	}
	return fmt.Sprintf("%s %s rep %d/%d", s, k.Mode, rep+1, reps)
}

// window returns n entries from the middle of tl: steady state, away from
// the start-up and the end.
func window(tl []results.Step, n int) []results.Step {
	if n <= 0 || len(tl) == 0 {
		return nil
	}
	if len(tl) <= n {
		return tl
	}
	lo := (len(tl) - n) / 2
	return slices.Clone(tl[lo : lo+n])
}

type nopProgress struct{}

func (nopProgress) Begin(int)   {}
func (nopProgress) Next(string) {}
func (nopProgress) Advance()    {}
func (nopProgress) Note(string) {}
