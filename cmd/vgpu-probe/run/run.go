// Package run is `vgpu-probe run`: the paper's experiments (Table I's
// scenarios x vCPU counts x co-runner VMs x wait modes) as one command,
// with results written to DIR/results.json for the profiler.
package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend/local"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/runner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/scenario"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/internal/progress"
	"github.com/vgpu-probe/vgpu-probe/results"
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
	Mitigate      string // --mitigate (mitigate.go): "" is off
	Backend       string
	Libvirt       LibvirtOptions
	SampleNVML    bool
	NVMLInterval  time.Duration
	JSON          bool
	// NVML opens the NVML library; NewCmd sets the real one. Tests pass
	// go-nvml's mock.
	NVML func() gonvml.Interface

	Out, Err io.Writer // where the table and notes go

	// Resolved by Complete.
	cpus     []int
	matrix   scenario.Matrix
	hasAgent bool   // the binary has an agent subcommand
	self     string // this executable, which runs the agent
	outGiven bool
	vcpusSet bool
	nvmlSet  bool
	// mitigation is --mitigate parsed; nil: off.
	mitigation *mitigate.Config
}

// NewCmd returns the run command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{NVML: func() gonvml.Interface { return gonvml.New() }}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the paper's experiments: GPU runner vs co-runner VMs sharing CPUs",
		Long: `run reproduces the paper's interference experiments (Table I, Figs. 4-6):
a GPU runner VM and co-runner VMs sharing CPUs, the runner's loop once per
wait mode. It prints each cell's median wall time and its slowdown against
the fastest baseline cell of the same vCPU count, then the best mode of
each row with its margin over the next, and a warning where repetitions
disagree by more than that margin (--json: the results document). On the local backend a VM with N vCPUs is a process with N
threads pinned to CPUs that the VMs share:

  shared1   runner and co-runner VMs on the same CPUs, no isolation
  shared2   the same, each VM capped to a fair share of CPU bandwidth
            (needs root, else skipped with a note)
  baseline  the runner alone with half the vCPUs (at least one)

Results go to --out DIR/results.json after each group of cells; an
interrupted run keeps them and continues with --resume. Details:
docs/experiments.md.`,
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
			o.nvmlSet = cmd.Flags().Changed("nvml")
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
	f.StringSliceVar(&o.Modes, "modes", workload.ModeNames(workload.DefaultModes), "wait modes: "+strings.Join(hybridsync.Modes(), ", "))
	f.StringVar(&o.Device, "device", "sim", "GPU of the built-in workload: "+strings.Join(workload.Devices(), ", "))
	f.StringVar(&o.WorkloadCmd, "workload-cmd", "", "run this shell command as the GPU workload instead (gets HYBRIDSYNC_MODE)")
	f.IntVar(&o.Steps, "steps", 300, "steps of the built-in workload per measurement")
	f.Float64Var(&o.HostUS, "host-us", 200, "host CPU work per step, µs (split across the runner's vCPUs)")
	f.Float64Var(&o.KernelUS, "kernel-us", 500, "kernel duration, µs")
	f.IntVar(&o.Reps, "reps", 3, "repetitions per cell; the median is reported, min and max kept")
	f.DurationVar(&o.Period, "cpu-period", 20*time.Millisecond, "CPU bandwidth period of shared2's quotas")
	f.IntVar(&o.TimelineSteps, "timeline-steps", 100, "steps per vCPU of the median run kept per cell for the profiler (0: none)")
	f.StringVar(&o.OutDir, "out", "", "output directory (default vgpu-probe-results/run-TIMESTAMP)")
	f.BoolVar(&o.Resume, "resume", false, "continue the run in --out: keep its cells, run the rest")
	f.BoolVar(&o.SampleNVML, "nvml", false, "sample GPU utilisation, clocks and memory with NVML during the run, into --out DIR/nvml-*.json (default: only with --device cuda; a host without a GPU is noted once)")
	f.DurationVar(&o.NVMLInterval, "nvml-interval", 200*time.Millisecond, "how often --nvml samples (0: off)")
	f.BoolVar(&o.JSON, "json", false, "print the results document (results.json) on stdout instead of the table")
	f.BoolVar(&o.WithAgent, "with-agent", false, "watch the runner and co-runners with the agent (eBPF, root) during one extra run per cell")
	f.BoolVar(&o.Hints, "hints", false, "--backend libvirt: publish the runner VM's hint page (the agent's, in-process; root) and have its guest's waits read it (HYBRIDSYNC_HINTS)")
	f.StringVar(&o.Backend, "backend", "local", "where VMs come from: local (processes, pinning, cgroups) or libvirt (real VMs booted from vmimages/)")
	addMitigateFlag(f, o)
	o.Libvirt.addFlags(f)
	complete.Flags(cmd, map[string]cobra.CompletionFunc{
		"scenario":    complete.List(scenario.Names()...),
		"corunner":    complete.One(corunner.Kinds...),
		"modes":       complete.List(hybridsync.Modes()...),
		"device":      complete.One(workload.Devices()...),
		"backend":     complete.One(backends...),
		"mitigate":    complete.Mitigate,
		"domain-type": complete.One(domainTypes...),
		"out":         complete.Dirs,
		"vm-image":    complete.Dirs,
	})
	return cmd
}

// backends are the values of --backend (Validate).
var backends = []string{"local", "libvirt"}

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
		o.OutDir = results.DefaultDir(results.KindRun, time.Now())
	}
	modes, err := workload.ParseModes(o.Modes)
	if err != nil {
		return fmt.Errorf("--modes: %w", err)
	}
	o.matrix = scenario.Matrix{Scenarios: o.Scenarios, Corunner: o.corunnerLabel(), Corunners: o.Corunners, VCPUs: o.VCPUs, Modes: modes}
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
	if o.CorunnerCmd == "" && !corunner.Valid(o.Corunner) {
		return fmt.Errorf("--corunner: unknown co-runner %q (want %s, or --corunner-cmd)", o.Corunner, strings.Join(corunner.Kinds, ", "))
	}
	for _, c := range []struct{ flag, cmd string }{{"--corunner-cmd", o.CorunnerCmd}, {"--workload-cmd", o.WorkloadCmd}} {
		if err := local.CheckCommand(c.cmd); err != nil {
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
	if err := o.checkMitigate(); err != nil {
		return err
	}
	if o.Resume && !o.outGiven {
		return fmt.Errorf("--resume needs --out DIR, the run to continue")
	}
	if o.WithAgent {
		if !o.hasAgent {
			return fmt.Errorf("--with-agent: this vgpu-probe has no agent subcommand")
		}
		var err error
		if o.self, err = os.Executable(); err != nil {
			return fmt.Errorf("--with-agent: find own executable: %w", err)
		}
	}
	return runner.CheckOut(o.OutDir, o.Resume, o.config())
}

// config is what results.json records as asked for.
func (o *Options) config() results.Config {
	c := results.Config{Backend: o.Backend, Scenarios: o.Scenarios, Corunner: o.corunnerLabel(), Corunners: o.Corunners,
		VCPUs: o.VCPUs, Modes: o.Modes, Reps: o.Reps, PeriodUS: o.Period.Microseconds(), Hints: o.Hints, Mitigate: o.Mitigate}
	if o.WorkloadCmd != "" {
		c.Workload = o.WorkloadCmd
	} else {
		c.Workload, c.Device, c.Steps, c.HostUS, c.KernelUS = "namd-like", o.Device, o.Steps, o.HostUS, o.KernelUS
	}
	return c
}

// Run runs the experiment and prints the slowdown table.
func Run(ctx context.Context, o *Options) error {
	p := progress.New(o.Err)
	feed, err := o.startFeed(ctx)
	if err != nil {
		return err
	}
	if feed != nil {
		defer feed.Close()
	}
	lo := local.Backend{}
	if feed.Mitigates() {
		lo.Inherit = feed.Inherit
	}
	var be backend.Backend = lo
	agent := runner.PIDAgent(o.self)
	if o.Backend == "libvirt" {
		lb := o.libvirtBackend(p)
		be, agent = lb, runner.DomainAgent(o.self, o.Libvirt.URI, lb.DomainName)
		if o.Hints {
			lb.Hints = feed
		}
		if feed.Mitigates() {
			lb.Mitigation = feed
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
		ro.Agent = agent
	}
	stopGPU := func() {}
	if o.sampleGPUs() {
		stopGPU = runner.SampleGPUs(ctx, o.NVML(), o.NVMLInterval, o.OutDir, o.Err)
	}
	f, err := runner.Run(ctx, ro)
	p.Finish(err == nil)
	stopGPU()
	path := filepath.Join(o.OutDir, runner.ResultsName)
	// Interrupted, run still prints the cells it finished; main exits with
	// the signal's status.
	interrupted := err != nil && ctx.Err() != nil
	if f != nil && len(f.Cells) > 0 && (err == nil || interrupted) {
		if err := o.print(f); err != nil {
			return err
		}
	}
	if err != nil {
		if f != nil && len(f.Cells) > 0 {
			fmt.Fprintf(o.Err, "vgpu-probe: %d cells finished before this and are in %s (continue with --out %s --resume)\n", len(f.Cells), path, o.OutDir)
		} else {
			// No cell, no results file (runner.Run): the directory goes
			// too where nothing else was written in it.
			os.Remove(o.OutDir)
		}
		if interrupted {
			return errors.New("interrupted; everything it started was stopped and removed")
		}
		return err
	}
	w := o.Out
	if o.JSON {
		w = o.Err
	}
	fmt.Fprintf(w, "\nresults: %s\n", path)
	return nil
}

// print writes the results as the table, or with --json as the results
// document.
func (o *Options) print(f *results.File) error {
	if !o.JSON {
		return runner.PrintTable(o.Out, f)
	}
	return results.Encode(o.Out, f)
}

// sampleGPUs is whether the run samples GPUs with NVML: where one is used
// (--device cuda) or asked for.
func (o *Options) sampleGPUs() bool {
	if o.nvmlSet {
		return o.SampleNVML && o.NVMLInterval > 0
	}
	return o.Device == "cuda" && o.WorkloadCmd == "" && o.NVMLInterval > 0
}
