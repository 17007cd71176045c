// Package bench is `vgpu-probe bench`: the NAMD-like sync benchmark over a
// matrix of CPU contention settings and wait modes.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/bench"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/progress"
	"github.com/vgpu-probe/vgpu-probe/experiments/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/results"
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
	// results/bench-TIMESTAMP.
	OutDir string
	// Mitigate is --mitigate (mitigate.go): "" is off.
	Mitigate string
	// Thresholds and HintsPage are --threshold and --hints-page (hints.go).
	Thresholds []string
	HintsPage  string

	Out, Err io.Writer

	// Resolved by complete.
	modes      []hybridsync.Mode
	profile    simdev.Profile
	mitigation *mitigate.Config
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
	f.BoolVar(&o.JSON, "json", false, "print JSON instead of a table")
	f.StringVar(&o.OutDir, "out", "", "directory for results.json, the results document `vgpu-probe report` reads (default results/bench-TIMESTAMP)")
	addMitigateFlag(f, o)
	addThresholdFlags(f, o)
	complete.Flags(cmd, map[string]cobra.CompletionFunc{
		"device":     complete.One(workload.Devices()...),
		"modes":      complete.List(hybridsync.Modes()...),
		"contention": complete.List(contentions...),
		"threshold":  complete.List(workload.Thresholds...),
		"mitigate":   complete.Mitigate,
		"profile":    cobra.FixedCompletions([]string{profileMixed}, cobra.ShellCompDirectiveDefault),
		"hints-page": complete.AnyFile,
		"out":        complete.Dirs,
	})
	return cmd
}

// complete validates the flags and resolves them.
func (o *Options) complete() error {
	if o.Steps <= 0 || o.Reps <= 0 {
		return fmt.Errorf("--steps and --reps must be positive")
	}
	if o.HostUS < 0 || o.KernelUS <= 0 || o.JitterPct < 0 || o.JitterPct >= 100 {
		return fmt.Errorf("--host-us must be >= 0, --kernel-us > 0, --jitter in [0, 100)")
	}
	var err error
	if o.modes, err = workload.ParseModes(o.Modes); err != nil {
		return fmt.Errorf("--modes: %w", err)
	}
	for _, c := range o.Contention {
		if !slices.Contains(contentions, c) {
			return fmt.Errorf("--contention: unknown setting %q (want %s)", c, strings.Join(contentions, ", "))
		}
	}
	if !slices.Contains(workload.Devices(), o.Device) {
		return fmt.Errorf("--device: unknown device %q (want %s)", o.Device, strings.Join(workload.Devices(), ", "))
	}
	if o.CapQuota <= 0 || o.CapQuota > o.CapPeriod {
		return fmt.Errorf("--cap-quota must be positive and at most --cap-period")
	}
	cpus, err := corunner.Online()
	if err != nil {
		return err
	}
	if o.CPU < 0 {
		o.CPU = cpus[len(cpus)-1]
	} else if !slices.Contains(cpus, o.CPU) {
		return fmt.Errorf("--cpu %d: not one this process may use (%v)", o.CPU, cpus)
	}
	if err := o.parseMitigate(); err != nil {
		return err
	}
	if err := o.parseThresholds(); err != nil {
		return err
	}
	return o.resolveProfile()
}

// profileMixed is the --profile of simdev.Mixed; any other value is a file.
const profileMixed = "mixed"

func (o *Options) resolveProfile() error {
	switch o.Profile {
	case "":
		o.profile = simdev.Fixed("kernel", time.Duration(o.KernelUS*1e3), o.JitterPct/100)
	case profileMixed:
		o.profile = simdev.Mixed
	default:
		b, err := os.ReadFile(o.Profile)
		if err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
		if o.profile, err = simdev.ParseProfile(string(b)); err != nil {
			return fmt.Errorf("--profile %s: %w", o.Profile, err)
		}
	}
	return nil
}

func run(ctx context.Context, o *Options) error {
	bar := progress.New(o.Err)
	bo := bench.Options{
		Device: o.Device, Modes: o.modes, Contentions: o.Contention, Thresholds: o.Thresholds,
		Steps: o.Steps, Reps: o.Reps, HostWork: time.Duration(o.HostUS * 1e3), Profile: o.profile,
		CapQuota: o.CapQuota, CapPeriod: o.CapPeriod, CPU: o.CPU, HintsPage: o.HintsPage,
		Mitigation: o.mitigation, Progress: bar,
	}
	rows, err := bench.Run(ctx, bo)
	bar.Finish(err == nil)
	// Interrupted, bench still prints the cells it finished; main exits
	// with the signal's status.
	interrupted := err != nil && ctx.Err() != nil
	if err != nil && !interrupted {
		return err
	}
	if err := o.print(rows, interrupted); err != nil {
		return err
	}
	if len(rows) > 0 {
		if err := o.write(bo, rows, interrupted); err != nil {
			return err
		}
	}
	if interrupted {
		return fmt.Errorf("interrupted after %d of %d cells; everything it started was stopped and removed", len(rows), bo.Cells())
	}
	return nil
}

// write stores the rows as the results document, DIR/results.json, and
// says where on stderr.
func (o *Options) write(bo bench.Options, rows []bench.Row, interrupted bool) error {
	dir := o.OutDir
	if dir == "" {
		dir = filepath.Join("results", "bench-"+time.Now().UTC().Format("20060102-150405"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	path := filepath.Join(dir, results.Name)
	if err := results.Write(path, bench.ResultsFile(bo, o.Profile, o.Mitigate, rows, interrupted)); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	fmt.Fprintf(o.Err, "results: %s\n", path)
	return nil
}

func (o *Options) print(rows []bench.Row, interrupted bool) error {
	if !o.JSON {
		return bench.PrintTable(o.Out, rows)
	}
	enc := json.NewEncoder(o.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(bench.Doc{Results: rows, Interrupted: interrupted})
}
