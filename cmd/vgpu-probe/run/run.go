// Package run is `vgpu-probe run`: the paper's experiments (Table I's
// scenarios x vCPU counts x co-runner VMs x wait modes) as one command,
// with results written to DIR/results.json for the profiler.
package run

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/backend/local"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/results"
	"github.com/vgpu-probe/vgpu-probe/experiments/runner"
	"github.com/vgpu-probe/vgpu-probe/experiments/scenario"
	"github.com/vgpu-probe/vgpu-probe/experiments/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/profiler/nvml"
)

// Options are run's flags and what they resolve to.
type Options struct {
	Scenarios     []string
	Corunner      string
	CorunnerCmd   string
	Corunners     []int
	VCPUs         []int
	Modes         []string
	Device        string
	WorkloadCmd   string
	Steps         int
	HostUS        float64
	KernelUS      float64
	Reps          int
	Period        time.Duration
	TimelineSteps int
	OutDir        string
	Resume        bool
	WithAgent     bool
	Hints         bool
	Backend       string
	Libvirt       LibvirtOptions
	NVMLInterval  time.Duration
	// NVML opens the NVML library; nil means the real one. Tests pass
	// go-nvml's mock.
	NVML func() gonvml.Interface

	Out, Err io.Writer // where the table and notes go

	// Resolved by Complete.
	cpus     []int
	matrix   scenario.Matrix
	hasAgent bool // the binary has an agent subcommand
	outGiven bool
	vcpusSet bool
}

// NewCmd returns the run command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the paper's experiments: GPU runner vs co-runner VMs sharing CPUs",
		Long: `run reproduces the paper's interference experiments (Table I, Figs. 4-6) and
prints the slowdown of each cell against the baseline. A "VM" with N vCPUs is,
on the local backend, a process with N threads, vCPU i pinned to the i-th CPU
of a set that the GPU runner VM and the co-runner VMs share:

  shared1   runner and co-runner VMs on the same CPUs, no isolation
  shared2   the same, each VM limited by cgroup CPU bandwidth to a fair share
            (vCPUs/(1+co-runners) CPUs per --cpu-period); needs root, else
            skipped with a note
  baseline  the runner alone with half the vCPUs (at least one)

The runner runs the built-in NAMD-like loop (--device sim: a simulated GPU, no
hardware needed) or any --workload-cmd, once per wait mode (HYBRIDSYNC_MODE).
Results go to --out DIR/results.json after each group of cells; an interrupted
run keeps them and continues with --resume. Every process and cgroup run makes
is removed when it ends, on Ctrl-C too.`,
		Example: `  vgpu-probe run --corunner while1
  vgpu-probe run --corunner stream --scenario shared1,baseline --vcpus 2 --reps 5
  vgpu-probe run --corunners 1,2,3,4 --scenario shared1,baseline --modes spin,block,hybrid
  vgpu-probe run --workload-cmd './namd2 +p2 apoa1.namd' --corunner-cmd './parsec/fluidanimate 2 5 in.fluid'
  vgpu-probe run --out results/fig4 --resume`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			o.outGiven = cmd.Flags().Changed("out")
			o.vcpusSet = cmd.Flags().Changed("vcpus")
			if a, _, err := cmd.Root().Find([]string{"agent"}); err == nil && a != cmd.Root() && a.Name() == "agent" {
				o.hasAgent = true
			}
			if err := o.Complete(); err != nil {
				return usage.Wrap(err)
			}
			if err := o.Validate(); err != nil {
				return usage.Wrap(err)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Scenarios, "scenario", scenario.Names(), "scenarios (Table I): "+strings.Join(scenario.Names(), ", "))
	f.StringVar(&o.Corunner, "corunner", "while1", "co-runner: "+strings.Join(corunner.Kinds, ", "))
	f.StringVar(&o.CorunnerCmd, "corunner-cmd", "", "run this shell command in each co-runner VM instead (restarted if it exits)")
	f.IntSliceVar(&o.Corunners, "corunners", []int{1}, fmt.Sprintf("co-runner VMs sharing the runner's CPUs, 1-%d (Fig. 6)", scenario.MaxCorunners))
	f.IntSliceVar(&o.VCPUs, "vcpus", nil, "vCPUs per VM (default: the paper's 16,32,64 scaled to this machine)")
	f.StringSliceVar(&o.Modes, "modes", []string{"spin", "yield", "block", "hybrid"}, "wait modes: "+strings.Join(hybridsync.Modes(), ", "))
	f.StringVar(&o.Device, "device", "sim", "GPU of the built-in workload: "+strings.Join(workload.Devices(), ", "))
	f.StringVar(&o.WorkloadCmd, "workload-cmd", "", "run this shell command as the GPU workload instead (gets HYBRIDSYNC_MODE)")
	f.IntVar(&o.Steps, "steps", 300, "steps of the built-in workload per measurement")
	f.Float64Var(&o.HostUS, "host-us", 200, "host CPU work per step, µs (split across the runner's vCPUs)")
	f.Float64Var(&o.KernelUS, "kernel-us", 500, "kernel duration, µs")
	f.IntVar(&o.Reps, "reps", 3, "repetitions per cell; the median is reported, min and max kept")
	f.DurationVar(&o.Period, "cpu-period", 20*time.Millisecond, "CPU bandwidth period of shared2's quotas")
	f.IntVar(&o.TimelineSteps, "timeline-steps", 100, "steps per vCPU of the median run kept per cell for the profiler (0: none)")
	f.StringVar(&o.OutDir, "out", "", "output directory (default results/run-TIMESTAMP)")
	f.BoolVar(&o.Resume, "resume", false, "continue the run in --out: keep its cells, run the rest")
	f.DurationVar(&o.NVMLInterval, "nvml-interval", 200*time.Millisecond, "sample GPU utilisation, clocks and memory with NVML this often during the run, into --out DIR/nvml-*.json (0: off; a host without a GPU is noted once)")
	f.BoolVar(&o.WithAgent, "with-agent", false, "watch the runner and co-runners with the agent (eBPF, root) during one extra run per cell")
	f.BoolVar(&o.Hints, "hints", false, "--backend libvirt: publish the runner VM's hint page (the agent's, in-process; root) and have its guest's waits read it (HYBRIDSYNC_HINTS)")
	f.StringVar(&o.Backend, "backend", "local", "where VMs come from: local (processes, pinning, cgroups) or libvirt (real VMs booted from vmimages/)")
	o.Libvirt.addFlags(f)
	return cmd
}

// Complete fills in defaults that depend on the machine.
func (o *Options) Complete() error {
	cpus, err := corunner.Online()
	if err != nil {
		return err
	}
	o.cpus = cpus
	if !o.vcpusSet {
		o.VCPUs = scenario.ScaledVCPUs(len(cpus))
	}
	if !o.outGiven {
		o.OutDir = filepath.Join("results", "run-"+time.Now().UTC().Format("20060102-150405"))
	}
	o.matrix = scenario.Matrix{Scenarios: o.Scenarios, Corunner: o.corunnerLabel(), Corunners: o.Corunners, VCPUs: o.VCPUs, Modes: o.Modes}
	return nil
}

func (o *Options) corunnerLabel() string {
	if o.CorunnerCmd != "" {
		return o.CorunnerCmd
	}
	return o.Corunner
}

// Validate rejects bad input before anything starts.
func (o *Options) Validate() error {
	switch o.Backend {
	case "local":
	case "libvirt":
		if err := o.validateLibvirt(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--backend %q: want local or libvirt", o.Backend)
	}
	if err := o.matrix.Validate(len(o.cpus)); err != nil {
		return err
	}
	for _, m := range o.Modes {
		if _, err := hybridsync.ParseMode(m); err != nil {
			return fmt.Errorf("--modes: %w", err)
		}
	}
	if o.CorunnerCmd == "" && !corunner.Valid(o.Corunner) {
		return fmt.Errorf("--corunner: unknown co-runner %q (want %s, or --corunner-cmd)", o.Corunner, strings.Join(corunner.Kinds, ", "))
	}
	for _, c := range []struct{ flag, cmd string }{{"--corunner-cmd", o.CorunnerCmd}, {"--workload-cmd", o.WorkloadCmd}} {
		if err := checkCommand(c.cmd); err != nil {
			return fmt.Errorf("%s: %w", c.flag, err)
		}
	}
	if o.WorkloadCmd == "" {
		if !slices.Contains(workload.Devices(), o.Device) {
			return fmt.Errorf("--device: unknown device %q (want %s)", o.Device, strings.Join(workload.Devices(), ", "))
		}
		if o.Steps <= 0 || o.HostUS < 0 || o.KernelUS <= 0 {
			return fmt.Errorf("--steps and --kernel-us must be positive, --host-us at least 0")
		}
	}
	if o.Reps <= 0 {
		return fmt.Errorf("--reps must be positive")
	}
	if o.Period < time.Millisecond || o.Period > time.Second {
		return fmt.Errorf("--cpu-period %v: want 1ms to 1s", o.Period)
	}
	if o.NVMLInterval < 0 || (o.NVMLInterval > 0 && o.NVMLInterval < 10*time.Millisecond) {
		return fmt.Errorf("--nvml-interval %v: want 0 (off) or at least 10ms", o.NVMLInterval)
	}
	if o.TimelineSteps < 0 {
		return fmt.Errorf("--timeline-steps must be at least 0")
	}
	if err := o.checkHints(); err != nil {
		return err
	}
	if o.Resume && !o.outGiven {
		return fmt.Errorf("--resume needs --out DIR, the run to continue")
	}
	if o.WithAgent {
		if !o.hasAgent {
			return fmt.Errorf("--with-agent: this vgpu-probe has no agent subcommand")
		}
		if _, err := os.Executable(); err != nil {
			return fmt.Errorf("--with-agent: find own executable: %w", err)
		}
	}
	return runner.CheckOut(o.OutDir, o.Resume, o.config())
}

// checkCommand rejects an empty command or one whose program is not
// found. Commands that use shell syntax before the program name are left
// to the shell.
func checkCommand(cmd string) error {
	if cmd == "" {
		return nil
	}
	fields := strings.Fields(cmd)
	if len(fields) == 0 {
		return errors.New("empty command")
	}
	prog := ""
	for _, f := range fields {
		if k, _, ok := strings.Cut(f, "="); ok && k != "" && !strings.ContainsAny(k, "/'\"$") {
			continue // VAR=value before the program
		}
		prog = f
		break
	}
	if prog == "" || strings.ContainsAny(prog, "'\"$`(){};|&<>*?[]\\") || isShellWord(prog) {
		return nil
	}
	if _, err := exec.LookPath(prog); err != nil {
		return fmt.Errorf("%s: command not found", prog)
	}
	return nil
}

func isShellWord(w string) bool {
	switch w {
	case "while", "for", "if", "until", "case", "exec", "cd", "export", ":", ".", "!", "{", "(", "set", "eval", "true", "false", "echo", "sleep":
		return true
	}
	return false
}

// config is what results.json records as asked for.
func (o *Options) config() results.Config {
	c := results.Config{Backend: o.Backend, Scenarios: o.Scenarios, Corunner: o.corunnerLabel(), Corunners: o.Corunners,
		VCPUs: o.VCPUs, Modes: o.Modes, Reps: o.Reps, PeriodUS: o.Period.Microseconds(), Hints: o.Hints}
	if o.WorkloadCmd != "" {
		c.Workload = o.WorkloadCmd
	} else {
		c.Workload, c.Device, c.Steps, c.HostUS, c.KernelUS = "namd-like", o.Device, o.Steps, o.HostUS, o.KernelUS
	}
	return c
}

// Run runs the experiment and prints the slowdown table.
func Run(ctx context.Context, o *Options) error {
	p := newProgress(o.Err)
	var be backend.Backend = local.Backend{}
	agentFn := runAgent
	if o.Backend == "libvirt" {
		lb := o.libvirtBackend(p)
		be, agentFn = lb, libvirtAgent(lb, o.Libvirt.URI)
		if o.Hints {
			f, err := startHintFeed(ctx)
			if err != nil {
				return err
			}
			defer f.close()
			lb.Hints = f
		}
	}
	ro := runner.Options{
		Backend: be,
		Matrix:  o.matrix,
		Load:    backend.Load{Kind: o.Corunner, Cmd: o.CorunnerCmd},
		Workload: backend.Workload{
			Config: workload.Config{Steps: o.Steps, Profile: simdev.Fixed("kernel", time.Duration(o.KernelUS*1e3), 0), Seed: 1},
			Device: o.Device,
			Cmd:    o.WorkloadCmd,
		},
		HostWork:      time.Duration(o.HostUS * 1e3),
		Reps:          o.Reps,
		Period:        o.Period,
		CPUs:          o.cpus,
		OutDir:        o.OutDir,
		Resume:        o.Resume,
		TimelineSteps: o.TimelineSteps,
		Config:        o.config(),
		Progress:      p,
	}
	if o.WithAgent {
		ro.Agent = agentFn
	}
	stopGPU := o.sampleGPUs(ctx)
	f, err := runner.Run(ctx, ro)
	p.finish(err == nil)
	stopGPU()
	path := filepath.Join(o.OutDir, runner.ResultsName)
	if err != nil {
		if f != nil && len(f.Cells) > 0 {
			fmt.Fprintf(o.Err, "vgpu-probe: %d cells finished before this and are in %s (continue with --out %s --resume)\n", len(f.Cells), path, o.OutDir)
		}
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; everything it started was stopped and removed")
		}
		return err
	}
	if err := PrintTable(o.Out, f); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "\nresults: %s\n", path)
	return nil
}

// sampleGPUs records NVML samples in the background for as long as the
// run lasts; the function it returns stops the recording and writes it
// beside results.json under a name of its own, so a resumed run adds a
// file and loses none. A host without a GPU or NVML is said once; the run
// goes on.
func (o *Options) sampleGPUs(ctx context.Context) (stop func()) {
	if o.NVMLInterval == 0 {
		return func() {}
	}
	open := o.NVML
	if open == nil {
		open = func() gonvml.Interface { return gonvml.New() }
	}
	s, err := nvml.Open(open())
	if err != nil {
		fmt.Fprintf(o.Err, "vgpu-probe: GPU utilisation not sampled: %v\n", err)
		return func() {}
	}
	// A day at 5 samples/s; beyond that the recording counts what it drops.
	rec := s.Start(ctx, o.NVMLInterval, 500_000)
	return func() {
		defer s.Close()
		ser, err := rec.Stop()
		if err != nil && len(ser.Samples) == 0 {
			fmt.Fprintf(o.Err, "vgpu-probe: GPU samples: %v\n", err)
			return
		}
		path := filepath.Join(o.OutDir, "nvml-"+time.Now().UTC().Format("20060102-150405")+".json")
		if err := nvml.WriteSeries(path, ser); err != nil {
			fmt.Fprintf(o.Err, "vgpu-probe: write GPU samples: %v\n", err)
			return
		}
		fmt.Fprintf(o.Err, "GPU samples: %s\n", path)
	}
}

// runAgent runs this binary's agent subcommand on the runner's and the
// co-runners' processes, serving on a free loopback port. Once it has
// logged that it watches every one of them, it calls ready; once done
// closes, it takes the agent's snapshot and each process's switch
// timeline, and stops it.
func runAgent(ctx context.Context, runnerPid int, corunners []int, ready func(), done <-chan struct{}) (runner.AgentRun, error) {
	var args, keys []string
	for _, pid := range append([]int{runnerPid}, corunners...) {
		args = append(args, "--pid", strconv.Itoa(pid))
		keys = append(keys, strconv.Itoa(pid))
	}
	return watchWithAgent(ctx, args, keys, ready, done)
}

// watchWithAgent runs the agent with targetArgs; keys name its targets
// (the runner's first) as its timeline endpoint knows them.
func watchWithAgent(ctx context.Context, targetArgs, keys []string, ready func(), done <-chan struct{}) (runner.AgentRun, error) {
	var run runner.AgentRun
	self, err := os.Executable()
	if err != nil {
		return run, err
	}
	// Trace continuously: the timelines must cover every step.
	args := append([]string{"agent", "--listen", "127.0.0.1:0", "--trace-every", "0"}, targetArgs...)
	cmd := exec.Command(self, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return run, err
	}
	if err := cmd.Start(); err != nil {
		return run, fmt.Errorf("agent: %w", err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		t := time.AfterFunc(5*time.Second, func() { cmd.Process.Kill() })
		cmd.Wait()
		t.Stop()
	}()
	// The agent logs "serving ... listen=ADDR" and one "watching target"
	// line per target once it has taken it in; its last line says why, if
	// it fails.
	addrCh, readyCh, last := make(chan string, 1), make(chan struct{}), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		seen, line := map[string]bool{}, ""
		for sc.Scan() {
			line = strings.TrimSpace(sc.Text())
			if i := strings.Index(line, "listen="); i >= 0 {
				select {
				case addrCh <- strings.Fields(line[i+len("listen="):])[0]:
				default:
				}
			}
			if strings.Contains(line, "watching target") {
				for _, k := range keys {
					if strings.Contains(line+" ", "/"+k+" ") && !seen[k] {
						if seen[k] = true; len(seen) == len(keys) {
							close(readyCh)
						}
					}
				}
			}
		}
		last <- line
	}()
	var addr string
	for addr == "" || readyCh != nil {
		select {
		case addr = <-addrCh:
		case <-readyCh:
			readyCh = nil
		case msg := <-last:
			return run, fmt.Errorf("agent exited: %s", msg)
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(runner.AgentStartTimeout):
			return run, errors.New("agent: not watching its targets after " + runner.AgentStartTimeout.String())
		}
	}
	started := time.Now()
	ready()
	select {
	case <-done:
	case <-ctx.Done():
		return run, ctx.Err()
	}
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string, v any) error {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return fmt.Errorf("agent %s: %w", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("agent %s: %s %s", path, resp.Status, strings.TrimSpace(string(b)))
		}
		return json.Unmarshal(b, v)
	}
	if err := get("/api/v1/snapshot", &run.Snapshot); err != nil {
		return run, err
	}
	secs := strconv.FormatFloat(math.Ceil(time.Since(started).Seconds())+1, 'f', 0, 64)
	for i, key := range keys {
		var tl struct {
			Events []struct {
				InMonoNs uint64  `json:"in_mono_ns"`
				TID      int     `json:"tid"`
				RunUS    float64 `json:"run_us"`
				OffUS    float64 `json:"off_us"`
			} `json:"events"`
		}
		if err := get("/api/v1/timeline?domain="+url.QueryEscape(key)+"&seconds="+secs, &tl); err != nil {
			return run, err
		}
		// Each event is one off-CPU interval, after a run of RunUS.
		byTID := map[int]*results.ThreadTrack{}
		var order []int
		for _, ev := range tl.Events {
			t := byTID[ev.TID]
			if t == nil {
				t = &results.ThreadTrack{Name: trackName(i, ev.TID), TID: ev.TID}
				byTID[ev.TID] = t
				order = append(order, ev.TID)
			}
			in := int64(ev.InMonoNs)
			out := in - int64(ev.OffUS*1e3)
			t.Intervals = append(t.Intervals,
				results.Interval{Start: out - int64(ev.RunUS*1e3), End: out, On: true},
				results.Interval{Start: out, End: in, On: false})
		}
		for _, tid := range order {
			run.Tracks = append(run.Tracks, *byTID[tid])
		}
	}
	return run, nil
}

// trackName names a thread's track: the runner's (VM 0) or a co-runner's.
func trackName(vm, tid int) string {
	if vm == 0 {
		return fmt.Sprintf("runner tid %d", tid)
	}
	return fmt.Sprintf("corunner%d tid %d", vm, tid)
}

// PrintTable prints the slowdown table: one row per scenario, vCPU count
// and co-runner count, one column per mode; baseline rows give the wall
// time the others are divided by.
func PrintTable(w io.Writer, f *results.File) error {
	var modes []string
	type row struct {
		key   results.Key
		cells map[string]results.Cell
	}
	var rows []*row
	find := func(k results.Key) *row {
		for _, r := range rows {
			if r.key == k {
				return r
			}
		}
		r := &row{key: k, cells: map[string]results.Cell{}}
		rows = append(rows, r)
		return r
	}
	for _, c := range f.Cells {
		if !slices.Contains(modes, c.Mode) {
			modes = append(modes, c.Mode)
		}
		k := c.Key
		k.Mode = ""
		find(k).cells[c.Mode] = c
	}
	slices.SortStableFunc(rows, func(a, b *row) int {
		if a.key.VCPUs != b.key.VCPUs {
			return a.key.VCPUs - b.key.VCPUs
		}
		return scenarioRank(a.key) - scenarioRank(b.key)
	})
	c := f.Config
	what := c.Workload
	if c.Device != "" {
		what = fmt.Sprintf("%s on %s", c.Workload, c.Device)
	}
	fmt.Fprintf(w, "Slowdown vs baseline: median wall time / the baseline's (same mode and vCPUs).\n%s, %s backend, %d reps; baseline rows give seconds.\n\n", what, c.Backend, c.Reps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\tvCPUs\tco-runners\t%s\t\n", strings.Join(modes, "\t"))
	for _, r := range rows {
		co := "-"
		if r.key.Corunners > 0 {
			co = fmt.Sprintf("%d x %s", r.key.Corunners, shorten(r.key.Corunner))
		}
		vc := strconv.Itoa(r.key.VCPUs)
		var cols []string
		for _, m := range modes {
			cell, ok := r.cells[m]
			switch {
			case !ok:
				cols = append(cols, "")
			case r.key.Scenario == scenario.Baseline:
				cols = append(cols, fmt.Sprintf("%.3fs", cell.Median.WallS))
				vc = fmt.Sprintf("%d (runner %d)", r.key.VCPUs, cell.RunnerVCPUs)
			case cell.Slowdown > 0:
				cols = append(cols, fmt.Sprintf("%.2fx", cell.Slowdown))
			default:
				cols = append(cols, fmt.Sprintf("%.3fs", cell.Median.WallS))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.key.Scenario, vc, co, strings.Join(cols, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func scenarioRank(k results.Key) int {
	for i, n := range scenario.Names() {
		if n == k.Scenario {
			// Baseline first: it is what the rows below are divided by.
			if n == scenario.Baseline {
				return -1
			}
			return i*100 + k.Corunners
		}
	}
	return 1000
}

func shorten(s string) string {
	if len(s) > 24 {
		return s[:21] + "..."
	}
	return s
}

// progress shows a bar with ETA on a terminal and nothing elsewhere; notes
// always go to the error stream.
type progress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
	vis bool
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, vis: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progress) Begin(total int) {
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetVisibility(p.vis),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(20),
	)
}

func (p *progress) Next(desc string) {
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%-36s", desc))
	}
}

func (p *progress) Advance() {
	if p.bar != nil {
		p.bar.Add(1)
	}
}

// Note shows msg at once on a terminal; the table repeats every note at
// the end (and results.json keeps them), so elsewhere it is not doubled.
func (p *progress) Note(msg string) {
	if !p.vis {
		return
	}
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintf(p.w, "note: %s\n", msg)
}

func (p *progress) finish(ok bool) {
	if p.bar == nil {
		return
	}
	if ok {
		p.bar.Finish()
	} else {
		p.bar.Exit()
	}
}
