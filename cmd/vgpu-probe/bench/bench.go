// Package bench is `vgpu-probe bench`: the NAMD-like sync benchmark over a
// matrix of CPU contention settings and wait modes.
package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/bench"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/internal/progress"
)

// Options are bench's flags.
type Options struct {
	Device     string
	Modes      []string
	Contention []string
	Steps      int
	Reps       int
	HostUS     float64
	KernelUS   float64
	JitterPct  float64
	Profile    string
	CapQuota   time.Duration
	CapPeriod  time.Duration
	CPU        int
	JSON       bool
	// OutDir receives results.json, the results document; "" is
	// results.DefaultDir.
	OutDir string
	// Mitigate is --mitigate (mitigate.go): "" is off.
	Mitigate string
	// Thresholds and HintsPage are --threshold and --hints-page (hints.go).
	Thresholds []string
	HintsPage  string

	Out, Err io.Writer

	// run is the matrix the flags make (complete).
	run bench.Options
}

// Contention settings: what shares the benchmark's CPU.
var contentions = corunner.Contentions

// NewCmd returns the bench command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the NAMD-like sync benchmark for each wait mode under CPU contention",
		Long: `bench runs a synchronization-intensive loop like NAMD's: per step, a fixed
amount of real CPU work (--host-us, calibrated once), one kernel launch
(--kernel-us), one wait with the mode under test. Each cell of the matrix
(contention x mode x repetition) runs in its own process pinned to --cpu:

  none        the benchmark alone
  while1      a busy-loop co-runner pinned to the same CPU
  cap         the benchmark under cgroup CPU bandwidth control (--cap-quota per --cap-period)
  cap+while1  both: capped benchmark, uncapped co-runner in another cgroup

Wall time is reported per cell (median of --reps) and as a ratio to spin with
no contention. --out DIR gets results.json, the results document that
vgpu-probe report reads (slowdowns there are against the fastest cell of
the setting none, any mode). Needs root for the cap settings. Everything bench starts or
creates (co-runners, cgroups) is removed when it ends; interrupted (Ctrl-C,
SIGTERM), it still prints the cells it finished.

--threshold runs every cell once per source of the remaining time slice:
guest (the guest-only estimate, the default), static (the paper's fixed
10 ms max_threshold) and hints (the host agent's hint page: bench publishes
it in-process for each cell, as root, or reads --hints-page).

With --device cuda the waits are configured from HYBRIDSYNC_* as the library
is (--threshold overrides HYBRIDSYNC_HINTS and HYBRIDSYNC_MAX_SPIN_US); HYBRIDSYNC_STATS=DIR/stats-%p.json writes each cell's per-kernel wait
statistics (one file per cell process).`,
		Example: `  vgpu-probe bench
  vgpu-probe bench --contention none,while1,cap --reps 5 --json
  vgpu-probe bench --profile mixed --modes hybrid,block
  sudo vgpu-probe bench --contention while1,cap --threshold hints,guest,static --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := o.complete(); err != nil {
				return usage.Wrap(err)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Device, "device", "sim", "device: "+strings.Join(workload.Devices(), ", ")+" (sim: simulated GPU, no hardware needed)")
	f.StringSliceVar(&o.Modes, "modes", workload.ModeNames(workload.DefaultModes), "wait modes: "+strings.Join(hybridsync.Modes(), ", "))
	f.StringSliceVar(&o.Contention, "contention", []string{"none", "while1", "cap"}, "contention settings: "+strings.Join(contentions, ", "))
	f.IntVar(&o.Steps, "steps", 1500, "steps per run")
	f.IntVar(&o.Reps, "reps", 3, "repetitions per cell; the median is reported")
	f.Float64Var(&o.HostUS, "host-us", 200, "CPU work per step, µs")
	f.Float64Var(&o.KernelUS, "kernel-us", 500, "kernel duration, µs (ignored with --profile)")
	f.Float64Var(&o.JitterPct, "jitter", 0, "kernel duration jitter, percent (ignored with --profile)")
	f.StringVar(&o.Profile, "profile", "", "kernel profile: 'mixed' (50µs, 500µs, 2ms kernels) or a file of lines NAME DURATION [JITTER%]")
	f.DurationVar(&o.CapQuota, "cap-quota", 10*time.Millisecond, "CPU quota per period for the cap settings")
	f.DurationVar(&o.CapPeriod, "cap-period", 20*time.Millisecond, "CPU bandwidth period for the cap settings")
	f.IntVar(&o.CPU, "cpu", -1, "CPU to pin the benchmark and co-runner to (default: the last one this process may use)")
	f.BoolVar(&o.JSON, "json", false, "print the results document (results.json, with the table as its bench part) instead of the table")
	f.StringVar(&o.OutDir, "out", "", "directory for results.json, the results document `vgpu-probe report` reads (default vgpu-probe-results/bench-TIMESTAMP, UTC)")
	f.StringVar(&o.Mitigate, "mitigate", "", "give each benchmark cell's threads (not the co-runner's) a short EEVDF slice, as the agent's --mitigate does: "+mitigate.Usage+" (needs Linux 6.12+)")
	f.StringSliceVar(&o.Thresholds, "threshold", []string{workload.ThresholdGuest},
		"where the wait takes the remaining time slice from: hints (the agent's hint page), guest (the guest-only estimate), static (the paper's fixed 10 ms); overrides HYBRIDSYNC_HINTS and HYBRIDSYNC_MAX_SPIN_US in the cells")
	f.StringVar(&o.HintsPage, "hints-page", "", "with --threshold hints: read this page (a running agent's, or the guest's "+
		"/dev/shm/vgpu-probe-hints) instead of publishing one in-process (which needs root)")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{
		"device":     complete.One(workload.Devices()...),
		"modes":      complete.List(hybridsync.Modes()...),
		"contention": complete.List(contentions...),
		"threshold":  complete.List(workload.Thresholds...),
		"mitigate":   complete.Mitigate,
		"profile":    cobra.FixedCompletions([]string{bench.ProfileMixed}, cobra.ShellCompDirectiveDefault),
		"hints-page": complete.AnyFile,
		"out":        complete.Dirs,
	})
	return cmd
}

// complete checks the flags and makes the matrix of them (bench.Options.Check).
func (o *Options) complete() error {
	if o.HostUS < 0 || o.KernelUS <= 0 || o.JitterPct < 0 || o.JitterPct >= 100 {
		return fmt.Errorf("--host-us must be >= 0, --kernel-us > 0, --jitter in [0, 100)")
	}
	modes, err := workload.ParseModes(o.Modes)
	if err != nil {
		return fmt.Errorf("--modes: %w", err)
	}
	o.run = bench.Options{Device: o.Device, Modes: modes, Contentions: o.Contention, Thresholds: o.Thresholds,
		Steps: o.Steps, Reps: o.Reps, HostWork: time.Duration(o.HostUS * 1e3), CapQuota: o.CapQuota,
		CapPeriod: o.CapPeriod, CPU: o.CPU, HintsPage: o.HintsPage}
	if o.Mitigate != "" {
		cfg, err := mitigate.Parse(o.Mitigate)
		if err != nil {
			return err
		}
		o.run.Mitigation = &cfg
	}
	if err := o.run.Check(); err != nil {
		return err
	}
	o.run.Profile, err = bench.ParseProfile(o.Profile, time.Duration(o.KernelUS*1e3), o.JitterPct/100)
	return err
}

func run(ctx context.Context, o *Options) error {
	bar := progress.New(o.Err)
	bo := o.run
	bo.Progress = bar
	rows, err := bench.Run(ctx, bo)
	bar.Finish(err == nil)
	// Interrupted, bench still prints the cells it finished; main exits
	// with the signal's status.
	interrupted := err != nil && ctx.Err() != nil
	if err != nil && !interrupted {
		return err
	}
	f := bench.ResultsFile(bo, o.Profile, o.Mitigate, rows, interrupted)
	if err := bench.Print(o.Out, rows, f, o.JSON); err != nil {
		return err
	}
	if len(rows) > 0 {
		path, err := bench.WriteResults(o.OutDir, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Err, "results: %s\n", path)
	}
	if interrupted {
		return fmt.Errorf("interrupted after %d of %d cells; everything it started was stopped and removed", len(rows), bo.Cells())
	}
	return nil
}
