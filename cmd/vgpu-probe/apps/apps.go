// Package apps is `vgpu-probe apps`: unmodified GPU programs (PyTorch,
// CuPy, nvcc-built CUDA) under CUDA's default wait, CUDA's blocking-sync
// mode and LD_PRELOAD=libhybridsync.so, each under the contention settings
// of bench, interleaved, with one ratio table at the end. The suite itself
// is experiments/apps/suite.
package apps

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

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Options are apps' flags: the suite's matrix, and where its programs
// and output come from and go.
type Options struct {
	suite.Config
	Program []string // --program NAME=COMMAND
	Suite   string
	OutDir  string
	JSON    bool
	From    []string
	agentFlags

	Out, Err io.Writer
}

// NewCmd returns the apps command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "apps",
		Short: "Run unmodified GPU programs under CUDA's wait modes and libhybridsync, under CPU contention",
		Long: `apps runs unmodified GPU programs (no hybridsync code in them) in arms (--arms):

` + suite.ArmsHelp + `

Each arm runs under the contention settings of bench:

` + suite.SettingsHelp + `

Each program prints one JSON line {"program","steps","wall_s","cpu_s"} at
the end, timed around its own loop, or is timed whole: one whose last line
on stdout does not start with "{" (or that prints nothing) gets the wall
seconds from its exec to its exit and the CPU seconds of its process tree
(its own, its reaped children's and those of what it left running; a child
it orphaned that ended before it is missed). A suite entry may name a "ready" line
the program writes to stderr once it is set up: the co-runner and the cap
then start only from there, so that a slow start-up (importing PyTorch)
does not run under contention; without one (or with --contend-at-start)
they are in place from the start. For each repetition, program and contention setting, the arms run
back to back in an order that rotates, so no arm always runs first; the
programs of a repetition rotate as well. The table gives, per program and setting, each
arm's median wall time per step as a ratio to the program's cuda-default
run alone (min-max in brackets; per step because a program run for
--seconds does as many steps as fit) and its median CPU seconds (runs.jsonl
and --json have the time and CPU per step too), the best arm, and whether
hybridsync is within 3% of the better CUDA mode and never slower than
cuda-default. "paired" gives the same two ratios by repetition (median of
hybridsync over the other arm of the same repetition, which ran just
before or after it): on a noisy machine it shows a few percent that the
medians of whole arms cannot. Beside each is a confidence interval of
that median which assumes nothing of the distribution (order statistics;
95%, or [min-max] below 6 repetitions, with its level), and "target" is
decided from the intervals: met when the whole interval is within the
bound, MISSED when all of it is beyond, open when it straddles the bound
(more repetitions needed). "A/A paired" (cuda-default-again over
cuda-default) is the spread that ratios must exceed to mean anything;
"vs default paired" gives the OpenMP, launcher and linked arms'. A run
that fails (exit status, a malformed result line, --timeout) is
recorded, left out of the medians and listed; the exit status is then 1.

A suite entry with "in_process": true compares the arms inside one
process instead (experiments/apps/inproc.py): it runs once per repetition
and setting under --lib with --epoch-s (0.3 s, or under a cap the nearest
whole number of --cap-period), and prints "rounds", records of {"round",
"arm", "steps", "wall_s", "cpu_s"} of the arms named in APPS_INPROC_ARMS
(the suite sets it to --arms); each becomes a run, and "paired" then
pairs the arms of one round. Separate processes of one program can differ by
30% on a virtualised GPU host, which pairing by repetition cannot remove.

--from FILE[,FILE] prints the table of earlier runs (their runs.jsonl,
several taken together) without running anything; runs pair only with
runs of the same file and repetition.

--with-agent runs the agent in-process (root) beside the suite, watching
each program's process (never the co-runner's) while it runs: with --hints
it publishes the program's hint page and sets the program's
HYBRIDSYNC_HINTS to it; with --mitigate slice=100us the program's threads
get that EEVDF slice from their start, which the page then carries. Every
arm runs under the same setting, unless --mitigate-arms names the arms
that keep the slice: programs that compare the arms in one process then
give all their threads the kernel's default slice for the other arms
and the agent's back after them (each round records its slice_ns), so
that CUDA as it runs without the agent and the library with it meet in
one process. runs.jsonl and summary.json record the setting, and --from
refuses files of different settings.

--out gets runs.jsonl (one row per run, written as it goes), summary.json,
results.json (the results document that vgpu-probe report reads: each
program's cells against its fastest arm alone, by time per step),
and stats/PROGRAM-CONTENTION-REP.json from each hybridsync run
(HYBRIDSYNC_STATS). The cap settings need root. Co-runners and cgroups are
removed after each cell, also on Ctrl-C and failure.`,
		Example: `  vgpu-probe apps --suite experiments/apps/suite.json --dir build/apps \
      --lib build/device/lib/libhybridsync.so --blocksync build/apps/blocksync.so
  make && ./vgpu-probe apps --program 'mine=./my_cuda_app --size 4096' --contention none,while1 --reps 5
  vgpu-probe apps --program 'infer=python3 infer.py --batch 8' --arms cuda-default,hybridsync \
      --lib libhybridsync.so --contention none,while1 --reps 7 --json
  sudo vgpu-probe apps --suite experiments/apps/inproc.json --dir build/apps \
      --lib build/device/lib/libhybridsync.so --contention none,while1 \
      --with-agent --hints --mitigate slice=100us --mitigate-arms hybridsync
  vgpu-probe apps --from vgpu-probe-results/apps-20261124-135706/runs.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if len(o.From) > 0 {
				if len(o.Program) > 0 || o.Suite != "" {
					return usage.Errorf("--from prints the table of earlier runs; it runs nothing (no --program or --suite)")
				}
				return summarizeFrom(o)
			}
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
	f.StringArrayVar(&o.Program, "program", nil, "a program as NAME=COMMAND (shell words; repeatable)")
	f.StringVar(&o.Suite, "suite", "", "a JSON file listing programs: [{\"name\":..,\"command\":..}, ...]")
	f.StringSliceVar(&o.Only, "only", nil, "run only these programs (names from --suite or --program)")
	f.StringVar(&o.Dir, "dir", ".", "directory the programs run in; relative paths in their commands are resolved there")
	f.StringSliceVar(&o.Arms, "arms", suite.Arms, "arms: "+strings.Join(suite.AllArms, ", "))
	f.StringSliceVar(&o.Contention, "contention", corunner.Contentions, suite.ContentionHelp)
	f.IntVar(&o.Reps, "reps", 5, "repetitions of every cell; medians are reported")
	f.IntVar(&o.CPU, "cpu", -1, "CPU to pin the program and the co-runner to, the highest of N for the settings xN (default: the last one this process may use)")
	f.StringVar(&o.Lib, "lib", "", "libhybridsync.so (needed by the hybridsync arm and by in-process programs; default: build/lib/libhybridsync.so beside the binary, or PREFIX/lib's)")
	f.StringVar(&o.Blocksync, "blocksync", "", "the blocking-sync shim blocksync.so (needed by the cuda-blocking arm; default: build/"+suite.BlocksyncPath+" beside the binary, or PREFIX/"+suite.BlocksyncPath+")")
	f.BoolVar(&o.ContendAtStart, "contend-at-start", false, "put each setting in place before the program starts, not at its ready line (hybridsync-run measures contention at the start)")
	f.StringVar(&o.Launcher, "launcher", "", "the library's launcher hybridsync-run, for the hybridsync-run arm (default: bin/hybridsync-run beside --lib's folder)")
	f.Float64Var(&o.Seconds, "seconds", 0, "pass --seconds S to each program (0: do not; the programs default to 2 s)")
	f.StringVar(&o.OutDir, "out", "", "output directory (default vgpu-probe-results/apps-TIMESTAMP, UTC)")
	f.BoolVar(&o.JSON, "json", false, "print the results document (results.json, with the table as its apps part) instead of the table")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "time limit of one run")
	f.DurationVar(&o.CapQuota, "cap-quota", 10*time.Millisecond, "CPU quota per period for the cap settings")
	f.DurationVar(&o.CapPeriod, "cap-period", 20*time.Millisecond, "CPU bandwidth period for the cap settings")
	o.agentFlags.add(f)
	f.StringSliceVar(&o.From, "from", nil, "print the table (or --json) of earlier runs from these runs.jsonl files, taken together, and run nothing")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{
		"arms":          complete.List(suite.AllArms...),
		"contention":    complete.List(corunner.Contentions...),
		"suite":         complete.Files("json"),
		"dir":           complete.Dirs,
		"lib":           complete.Files("so"),
		"blocksync":     complete.Files("so"),
		"launcher":      complete.AnyFile,
		"out":           complete.Dirs,
		"from":          complete.Files("jsonl"),
		"mitigate":      complete.Mitigate,
		"mitigate-arms": complete.List(suite.AllArms...),
	})
	return cmd
}

// complete reads the programs of --suite and --program and checks the
// matrix.
func (o *Options) complete() error {
	o.Programs = nil
	if o.Suite != "" {
		b, err := os.ReadFile(o.Suite)
		if err != nil {
			return fmt.Errorf("--suite: %w", err)
		}
		ps, err := suite.ParseSuite(b)
		if err != nil {
			return fmt.Errorf("--suite %s: %w", o.Suite, err)
		}
		o.Programs = ps
	}
	for _, p := range o.Program {
		name, command, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("--program %q: want NAME=COMMAND", p)
		}
		o.Programs = append(o.Programs, suite.Program{Name: name, Command: command})
	}
	// The parts not given are those make built or make install installed
	// beside this binary, as advise finds them.
	if exe, err := os.Executable(); err == nil {
		p := suite.Built(suite.Parts{Lib: o.Lib, Blocksync: o.Blocksync, Launcher: o.Launcher}, exe)
		o.Lib, o.Blocksync, o.Launcher = p.Lib, p.Blocksync, p.Launcher
	}
	var err error
	if o.Agent, err = o.agent(); err != nil {
		return err
	}
	return o.Check()
}

func run(ctx context.Context, o *Options) error {
	out, err := results.OutDir(o.OutDir, results.KindApps, time.Now())
	if err != nil {
		return err
	}
	o.Log = o.Err
	if a := o.Agent.String(); a != "" {
		fmt.Fprintf(o.Err, "apps: the agent in-process watches each program: %s\n", a)
	}
	runs, err := o.Run(ctx, out)
	if errors.Is(err, suite.ErrExists) {
		return usage.Wrap(err)
	}
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(runs, suite.Run.OK) {
		// A results document without a cell would read as a result.
		return fmt.Errorf("every run failed (%s): no results.json written; the runs are in %s", firstError(runs), filepath.Join(out, suite.RunsName))
	}
	doc := suite.ResultsFile(runs, o.Names(), o.Contention, o.Arms, o.Reps, o.CapQuota, o.CapPeriod, results.ThisMachine())
	doc.Apps.CPU, doc.Apps.Out = o.CPU, out
	path, err := suite.WriteResults(out, doc)
	if err != nil {
		return err
	}
	err = doc.Apps.Print(o.Out, o.Err, encoder(o.JSON, doc))
	fmt.Fprintf(o.Err, "apps: raw runs in %s, results in %s\n", filepath.Join(out, suite.RunsName), path)
	return err
}

// firstError is the first failed run's error ("no runs" without any).
func firstError(runs []suite.Run) string {
	for _, r := range runs {
		if !r.OK() {
			return fmt.Sprintf("%s under %s, %s: %s", r.Program, r.Contention, r.Arm, r.Error)
		}
	}
	return "no runs"
}

// encoder prints doc with --json (results.Encode), nil without.
func encoder(asJSON bool, doc *results.File) func(io.Writer) error {
	if !asJSON {
		return nil
	}
	return func(w io.Writer) error { return results.Encode(w, doc) }
}

// summarizeFrom prints the table of the runs in o.From, earlier runs
// taken together (with --json their results document, of no machine).
func summarizeFrom(o *Options) error {
	runs, err := apptable.ReadRuns(o.From)
	if err != nil {
		return usage.Errorf("--from: %v", err)
	}
	if len(runs) == 0 {
		return usage.Errorf("--from: no runs in %s", strings.Join(o.From, ", "))
	}
	if a := apptable.AgentSettings(runs); len(a) > 1 {
		return usage.Errorf("--from: runs made under different agent settings (%q): give the files of one setting", a)
	}
	programs, contentions, arms := apptable.Present(runs)
	doc := suite.ResultsFile(runs, programs, contentions, arms, 0, 0, 0, results.Machine{})
	return doc.Apps.Print(o.Out, o.Err, encoder(o.JSON, doc))
}
