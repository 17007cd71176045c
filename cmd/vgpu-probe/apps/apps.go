// Package apps is `vgpu-probe apps`: unmodified GPU programs (PyTorch,
// CuPy, nvcc-built CUDA) under CUDA's default wait, CUDA's blocking-sync
// mode and LD_PRELOAD=libhybridsync.so, each under the contention settings
// of bench, interleaved, with one ratio table at the end.
package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
)

// Arms: how a program is run.
//
//	cuda-default   the command as is
//	cuda-blocking  LD_PRELOAD=--blocksync (CU_CTX_SCHED_BLOCKING_SYNC on the primary context)
//	hybridsync     LD_PRELOAD=--lib (libhybridsync.so in its default mode)
var Arms = []string{"cuda-default", "cuda-blocking", "hybridsync"}

// Program is one program of the suite.
type Program struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Seconds false: the program takes no --seconds flag.
	Seconds *bool `json:"seconds,omitempty"`
	// Ready is a line the program writes to stderr once it is set up,
	// before its warm-up: the contention setting is put in place from
	// then on, so that a slow start (Python importing PyTorch takes 4-5
	// s of CPU) does not run under contention for nothing. Without it,
	// the setting is in place before the program starts.
	Ready string `json:"ready,omitempty"`
	// InProcess: the program compares the arms itself, inside one
	// process (experiments/apps/inproc.py), where separate processes
	// vary more than the differences looked for. It runs once per
	// repetition and setting, under the hybridsync arm's LD_PRELOAD,
	// and each record of its result line's "rounds" becomes a run of its
	// arm, paired with the other arms of the same round.
	InProcess bool `json:"in_process,omitempty"`

	argv []string // resolved: the command's words, argv[0] a path
}

// Options are apps' flags.
type Options struct {
	Programs   []string
	Suite      string
	Only       []string
	Dir        string
	Arms       []string
	Contention []string
	Reps       int
	CPU        int
	Lib        string
	Blocksync  string
	Seconds    float64
	OutDir     string
	JSON       bool
	Timeout    time.Duration
	CapQuota   time.Duration
	CapPeriod  time.Duration
	From       []string

	Out, Err io.Writer

	progs []Program // resolved by complete
}

// NewCmd returns the apps command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "apps",
		Short: "Run unmodified GPU programs under CUDA's wait modes and libhybridsync, under CPU contention",
		Long: `apps runs unmodified GPU programs (no hybridsync code in them) in three arms:

  cuda-default   the command as is
  cuda-blocking  under LD_PRELOAD=--blocksync, CUDA's own blocking-sync mode
  hybridsync     under LD_PRELOAD=--lib, libhybridsync.so in its default mode

each under the contention settings of bench, on one CPU (--cpu):

  none        the program alone
  while1      a busy-loop co-runner pinned to the same CPU
  cap         the program in a cgroup limited to --cap-quota per --cap-period
  cap+while1  both: capped program, uncapped co-runner outside its cgroup

Each program prints one JSON line {"program","steps","wall_s","cpu_s"} at
the end, timed around its own loop. A suite entry may name a "ready" line
the program writes to stderr once it is set up: the co-runner and the cap
then start only from there, so that a slow start-up (importing PyTorch)
does not run under contention; without one they are in place from the
start. For each repetition, program and contention setting, the arms run
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
(more repetitions needed). A run that fails (exit status, no JSON line, --timeout) is
recorded, left out of the medians and listed; the exit status is then 1.

A suite entry with "in_process": true compares the arms inside one
process instead (experiments/apps/inproc.py): it runs once per repetition
and setting under --lib with --epoch-s (0.3 s, or under a cap the nearest
whole number of --cap-period), and prints "rounds", records of {"round",
"arm", "steps", "wall_s", "cpu_s"}; each becomes a run, and "paired" then
pairs the arms of one round. Separate processes of one program can differ by
30% on a virtualised GPU host, which pairing by repetition cannot remove.

--from FILE[,FILE] prints the table of earlier runs (their runs.jsonl,
several taken together) without running anything; runs pair only with
runs of the same file and repetition.

--out gets runs.jsonl (one row per run, written as it goes), summary.json,
and stats/PROGRAM-CONTENTION-REP.json from each hybridsync run
(HYBRIDSYNC_STATS). The cap settings need root. Co-runners and cgroups are
removed after each cell, also on Ctrl-C and failure.`,
		Example: `  vgpu-probe apps --suite experiments/apps/suite.json --dir build/apps \
      --lib build/device/lib/libhybridsync.so --blocksync build/apps/blocksync.so
  vgpu-probe apps --program 'infer=python3 infer.py --batch 8' --arms cuda-default,hybridsync \
      --lib libhybridsync.so --contention none,while1 --reps 7 --json
  vgpu-probe apps --from results/apps-20261124-135706/runs.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if len(o.From) > 0 {
				if len(o.Programs) > 0 || o.Suite != "" {
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
	f.StringArrayVar(&o.Programs, "program", nil, "a program as NAME=COMMAND (shell words; repeatable)")
	f.StringVar(&o.Suite, "suite", "", "a JSON file listing programs: [{\"name\":..,\"command\":..}, ...]")
	f.StringSliceVar(&o.Only, "only", nil, "run only these programs (names from --suite or --program)")
	f.StringVar(&o.Dir, "dir", ".", "directory the programs run in; relative paths in their commands are resolved there")
	f.StringSliceVar(&o.Arms, "arms", Arms, "arms: "+strings.Join(Arms, ", "))
	f.StringSliceVar(&o.Contention, "contention", corunner.Contentions, "contention settings: "+strings.Join(corunner.Contentions, ", "))
	f.IntVar(&o.Reps, "reps", 5, "repetitions of every cell; medians are reported")
	f.IntVar(&o.CPU, "cpu", -1, "CPU to pin the program and the co-runner to (default: the last one this process may use)")
	f.StringVar(&o.Lib, "lib", "", "libhybridsync.so (needed by the hybridsync arm and by in-process programs)")
	f.StringVar(&o.Blocksync, "blocksync", "", "the blocking-sync shim blocksync.so (needed by the cuda-blocking arm)")
	f.Float64Var(&o.Seconds, "seconds", 0, "pass --seconds S to each program (0: do not; the programs default to 2 s)")
	f.StringVar(&o.OutDir, "out", "", "output directory (default results/apps-TIMESTAMP)")
	f.BoolVar(&o.JSON, "json", false, "print JSON instead of a table")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "time limit of one run")
	f.DurationVar(&o.CapQuota, "cap-quota", 10*time.Millisecond, "CPU quota per period for the cap settings")
	f.DurationVar(&o.CapPeriod, "cap-period", 20*time.Millisecond, "CPU bandwidth period for the cap settings")
	f.StringSliceVar(&o.From, "from", nil, "print the table (or --json) of earlier runs from these runs.jsonl files, taken together, and run nothing")
	return cmd
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// complete validates the flags and resolves the programs.
func (o *Options) complete() error {
	if o.Reps <= 0 {
		return errors.New("--reps must be positive")
	}
	if o.Seconds < 0 || o.Timeout <= 0 {
		return errors.New("--seconds must be >= 0 and --timeout positive")
	}
	if o.CapQuota <= 0 || o.CapQuota > o.CapPeriod {
		return errors.New("--cap-quota must be positive and at most --cap-period")
	}
	if len(o.Arms) == 0 || len(o.Contention) == 0 {
		return errors.New("--arms and --contention must not be empty")
	}
	if err := uniqueIn("--arms", "arm", o.Arms, Arms); err != nil {
		return err
	}
	if err := uniqueIn("--contention", "setting", o.Contention, corunner.Contentions); err != nil {
		return err
	}
	if st, err := os.Stat(o.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--dir %s: not a directory", o.Dir)
	}
	cpus, err := corunner.Online()
	if err != nil {
		return err
	}
	if o.CPU < 0 {
		o.CPU = cpus[len(cpus)-1]
	} else if !contains(cpus, o.CPU) {
		return fmt.Errorf("--cpu %d: not one this process may use (%v)", o.CPU, cpus)
	}
	o.progs = nil
	if o.Suite != "" {
		b, err := os.ReadFile(o.Suite)
		if err != nil {
			return fmt.Errorf("--suite: %w", err)
		}
		ps, err := ParseSuite(b)
		if err != nil {
			return fmt.Errorf("--suite %s: %w", o.Suite, err)
		}
		o.progs = append(o.progs, ps...)
	}
	for _, p := range o.Programs {
		name, command, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("--program %q: want NAME=COMMAND", p)
		}
		o.progs = append(o.progs, Program{Name: name, Command: command})
	}
	if len(o.progs) == 0 {
		return errors.New("no programs: give --suite or --program")
	}
	if len(o.Only) > 0 {
		var names []string
		for _, p := range o.progs {
			names = append(names, p.Name)
		}
		if err := uniqueIn("--only", "program", o.Only, names); err != nil {
			return err
		}
		var keep []Program
		for _, p := range o.progs {
			if contains(o.Only, p.Name) {
				keep = append(keep, p)
			}
		}
		o.progs = keep
	}
	seen := map[string]bool{}
	for i := range o.progs {
		p := &o.progs[i]
		if !nameRE.MatchString(p.Name) {
			return fmt.Errorf("program name %q: want letters, digits, '_', '.', '-'", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("program %q given twice", p.Name)
		}
		seen[p.Name] = true
		if err := p.resolve(o.Dir); err != nil {
			return fmt.Errorf("program %s: %w", p.Name, err)
		}
		if p.InProcess && !contains(o.Arms, "hybridsync") {
			return fmt.Errorf("program %s compares the arms in one process under --lib: --arms must include hybridsync", p.Name)
		}
	}
	return o.completeShims()
}

// completeShims checks the libraries the arms preload: --lib for the
// hybridsync arm, --blocksync for cuda-blocking unless every program
// compares the arms inside one process (which switches the mode itself).
func (o *Options) completeShims() error {
	separate := false
	for _, p := range o.progs {
		separate = separate || !p.InProcess
	}
	for _, need := range []struct {
		arm, flag string
		path      *string
	}{{"cuda-blocking", "--blocksync", &o.Blocksync}, {"hybridsync", "--lib", &o.Lib}} {
		if !contains(o.Arms, need.arm) || (need.arm == "cuda-blocking" && !separate) {
			continue
		}
		if *need.path == "" {
			return fmt.Errorf("the %s arm needs %s", need.arm, need.flag)
		}
		abs, err := filepath.Abs(*need.path)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", need.flag, err)
		}
		*need.path = abs
	}
	return nil
}

// ParseSuite reads a suite file: a JSON list of programs, or an object
// with the list under "programs".
func ParseSuite(b []byte) ([]Program, error) {
	var ps []Program
	if err := json.Unmarshal(b, &ps); err != nil {
		var doc struct {
			Programs []Program `json:"programs"`
		}
		if err2 := json.Unmarshal(b, &doc); err2 != nil {
			return nil, err
		}
		ps = doc.Programs
	}
	if len(ps) == 0 {
		return nil, errors.New("no programs in the suite")
	}
	for _, p := range ps {
		if p.Name == "" || p.Command == "" {
			return nil, errors.New("every program needs a name and a command")
		}
	}
	return ps, nil
}

// resolve splits the command into words and checks that the program, and
// a script given to an interpreter, exist.
func (p *Program) resolve(dir string) error {
	argv, err := SplitWords(p.Command)
	if err != nil {
		return err
	}
	if len(argv) == 0 {
		return errors.New("empty command")
	}
	if strings.Contains(argv[0], "/") {
		path := argv[0]
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("%s: not found", argv[0])
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: not an executable file", argv[0])
		}
		argv[0], _ = filepath.Abs(path)
	} else {
		path, err := exec.LookPath(argv[0])
		if err != nil {
			return fmt.Errorf("%s: not found in PATH", argv[0])
		}
		argv[0], _ = filepath.Abs(path)
	}
	// A script handed to an interpreter must exist too.
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") || !(strings.HasSuffix(a, ".py") || strings.HasSuffix(a, ".sh")) {
			continue
		}
		path := a
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s: not found in %s", a, dir)
		}
	}
	p.argv = argv
	return nil
}

// args returns the program's command line for a run.
func (p *Program) args(seconds float64) []string {
	a := append([]string(nil), p.argv...)
	// A program that compares the arms in one process times its own
	// rounds.
	if seconds > 0 && !p.InProcess && (p.Seconds == nil || *p.Seconds) {
		a = append(a, "--seconds", strconv.FormatFloat(seconds, 'f', -1, 64))
	}
	return a
}

func uniqueIn(flag, what string, list, valid []string) error {
	seen := map[string]bool{}
	for _, v := range list {
		if !contains(valid, v) {
			return fmt.Errorf("%s: unknown %s %q (want %s)", flag, what, v, strings.Join(valid, ", "))
		}
		if seen[v] {
			return fmt.Errorf("%s: %q given twice", flag, v)
		}
		seen[v] = true
	}
	return nil
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
