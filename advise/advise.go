package advise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/internal/progress"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/decide"
)

// Help is `vgpu-probe advise`'s help.
const Help = `advise answers "should I run my program as it is, in CUDA's blocking-sync
mode, under libhybridsync, or with hybridsync-run, on this VM?" by running
it every way that can apply, alone and beside a busy loop on each of its
CPUs, and ends with one line on stdout: how to run it, by how much that
gains with its interval, or that no way is measurably better than as it
is, and why.

It first runs the command once as it is and watches it: the CUDA ways
(cuda-blocking, hybridsync) apply only to a program that loads CUDA's
driver or runtime, the launcher's only to one that loads CUDA or an OpenMP
runtime; the others are left out, and said. A program that loads neither
gets "No way applies" then and there, and nothing is written. Without
--cpus, the program runs on as many CPUs as that first run kept threads
busy (at most the CPUs it may use).

The ways (apps' arms): cuda-default (the command as it is), cuda-blocking
(LD_PRELOAD=--blocksync, CUDA's blocking-sync mode), hybridsync
(LD_PRELOAD=--lib), hybridsync-run (the command under --launcher, left out
with a note if there is none), and cuda-default-again, the command as it is
once more: the A/A control. Each repetition runs every way back to back, in
an order that rotates, alone on its CPUs (none, nonexN) and beside a busy
loop pinned to each (while1, while1xN) in each pattern of --patterns:
start (there from the start), 1s or 10s (on that long, off as long:
while1xN-1s). Times are per step when the program prints apps' result
line, else the whole run.

The rule:

` + decide.Rule + `

Stderr has a line as soon as the first run starts, then one per
repetition. Ctrl-C stops it: the repetitions that ended are kept and
written, and the line gives the advice they support.

The parts are found beside the binary (build/lib, build/bin from make in
the source tree; PREFIX/lib, PREFIX/bin from make install), or given with
--lib, --blocksync and --launcher. A program that fails as it is, in the
first run, stops it with an error; one that fails in another way leaves
that way out. Results go to --out (default
vgpu-probe-results/advise-TIMESTAMP in the working directory, the time in
UTC, as run, bench and apps write):
runs.jsonl, summary.json, advice.json, and results.json for vgpu-probe
report, which shows the paired table. They are written to a hidden
directory beside --out and renamed to it at the end, so a failure leaves
nothing; one left by an advise that was killed is removed by the next in
the same folder.`

// Config is one advise: the command and its bounds.
type Config struct {
	Command []string // the program and its arguments
	CPUs    int      // 1 (none, while1) or N (nonexN, while1xN); 0: the threads the first run kept busy
	CPU     int      // the highest of its CPUs; -1: the last this process may use
	suite.Parts
	// Patterns are the busy loops' patterns measured, each a setting
	// (Patterns; none: start).
	Patterns         []string
	MinReps, MaxReps int
	MaxTime          time.Duration
	Out              string // "": results.DefaultDir(results.KindAdvise, ...)
	Table            bool   // print apps' table before the line
	Stdout, Stderr   io.Writer
}

// BadInput marks advise's errors caused by what it was given: the
// flags, the command, a command that fails as it is.
type BadInput struct{ Err error }

func (e BadInput) Error() string { return e.Err.Error() }
func (e BadInput) Unwrap() error { return e.Err }

// allArms are the arms advise runs, the A/A control among the ways,
// so that its distance in time from cuda-default is like theirs.
var allArms = []string{"cuda-default", "cuda-blocking", "cuda-default-again", "hybridsync", "hybridsync-run"}

// Patterns are the busy loops' patterns advise can measure
// (apptable.Patterns but late, which starts them at a ready line that
// only a suite entry names).
var Patterns = []string{"start", "1s", "10s"}

// settings returns the settings: alone, then beside a busy loop on each
// CPU in each pattern.
func (a *Config) settings() []string {
	loops := "while1"
	if a.CPUs > 1 {
		loops = fmt.Sprintf("while1x%d", a.CPUs)
	}
	out := []string{apptable.AloneOn(max(1, a.CPUs))}
	for _, p := range a.patterns() {
		if p == "start" {
			out = append(out, loops)
		} else {
			out = append(out, loops+"-"+p)
		}
	}
	return out
}

// patterns are --patterns, "start" where none are given.
func (a *Config) patterns() []string {
	if len(a.Patterns) == 0 {
		return []string{"start"}
	}
	return a.Patterns
}

// validate checks the flags, each error one line that names its flag.
func (a *Config) validate() error {
	switch {
	case len(a.Command) == 0 || a.Command[0] == "":
		return errors.New("no command: give it after --, as in vgpu-probe advise [flags] -- CMD ARGS")
	case a.MaxReps < 1 || a.MinReps < 1:
		return errors.New("--min-reps and --max-reps must be positive")
	case a.MinReps > a.MaxReps:
		return fmt.Errorf("--min-reps %d is more than --max-reps %d", a.MinReps, a.MaxReps)
	case a.MaxTime <= 0:
		return errors.New("--max-time must be positive")
	case a.CPUs < 0:
		return errors.New("--cpus must be positive (0: the CPUs its first run kept busy)")
	}
	for _, p := range a.Patterns {
		if !slices.Contains(Patterns, p) {
			return fmt.Errorf("--patterns %s: want some of %s (late needs a ready line, which a command does not give)", p, strings.Join(Patterns, ", "))
		}
	}
	if online, err := corunner.Online(); err == nil && a.CPUs > len(online) {
		return fmt.Errorf("--cpus %d: this process may use %d CPUs (%v)", a.CPUs, len(online), online)
	}
	return nil
}

// config is the suite's matrix for the command in the ways arms.
func (a *Config) config(arms []string) (*suite.Config, error) {
	if a.Launcher == "" {
		arms = slices.DeleteFunc(slices.Clone(arms), func(s string) bool { return s == "hybridsync-run" })
	}
	c := &suite.Config{Programs: []suite.Program{{Name: suite.ProgramName(a.Command[0]), Command: suite.QuoteWords(a.Command)}},
		Dir: ".", Arms: arms, Contention: a.settings(), Reps: a.MaxReps, CPU: a.CPU,
		Lib: a.Lib, Blocksync: a.Blocksync, Launcher: a.Launcher, Timeout: a.MaxTime,
		CapQuota: 10 * time.Millisecond, CapPeriod: 20 * time.Millisecond, Log: io.Discard}
	if err := c.Check(); err != nil {
		return nil, err
	}
	return c, nil
}

// Run runs the command in every way that can apply to it until the
// advice is decided or a bound is reached, writes the results to a.Out,
// prints the line on a.Stdout and returns the advice. Interrupted (ctx
// ends), it keeps the runs so far, prints the advice they support and
// returns it with ctx's error.
func Run(ctx context.Context, a *Config) (*decide.Advice, error) {
	if err := a.validate(); err != nil {
		return nil, BadInput{err}
	}
	out, err := outDir(a.Out)
	if err != nil {
		return nil, BadInput{err}
	}
	if _, err := a.config(allArms); err != nil {
		return nil, BadInput{err}
	}
	// --max-time bounds the whole advise, the first run and a repetition
	// under way included: a program slowed down by the machine's other
	// work must not hold it for many times the bound.
	bounded, cancel := context.WithTimeoutCause(ctx, a.MaxTime, errMaxTime)
	defer cancel()
	arms, err := a.firstRun(bounded)
	if errors.Is(context.Cause(bounded), errMaxTime) && ctx.Err() == nil {
		return nil, fmt.Errorf("--max-time %v ended the first run as it is: nothing written (give a longer --max-time)", a.MaxTime)
	}
	if err != nil {
		return nil, err
	}
	if arms == nil {
		return &decide.Advice{Decided: true}, nil
	}
	c, err := a.config(arms)
	if err != nil {
		return nil, BadInput{err}
	}
	work, err := workDir(out)
	if err != nil {
		return nil, BadInput{err}
	}
	defer os.RemoveAll(work)
	runs, reps, stopped := a.repeat(bounded, c, work)
	if stopped != nil && !errors.Is(stopped, context.Canceled) {
		return nil, stopped
	}
	if reps == 0 {
		fmt.Fprintln(a.Stderr, "advise: no repetition ended: nothing written")
		if stopped == nil {
			return nil, fmt.Errorf("--max-time %v ended the first repetition: nothing written (give a longer --max-time)", a.MaxTime)
		}
		return nil, stopped
	}
	adv := adviceOf(runs, c)
	if err := a.keep(work, out, runs, reps, c, &adv); err != nil {
		return nil, err
	}
	fmt.Fprintln(a.Stdout, adv.Line(a.runWith(c), reps))
	return &adv, stopped
}

// keep writes the runs and the advice into work, renames it to out, and
// says so.
func (a *Config) keep(work, out string, runs []suite.Run, reps int, c *suite.Config, adv *decide.Advice) error {
	for i := range runs {
		if runs[i].Stats != "" {
			runs[i].Stats = filepath.Join(out, strings.TrimPrefix(runs[i].Stats, work))
		}
	}
	if err := writeAdvice(work, out, runs, reps, c, adv); err != nil {
		return err
	}
	// MkdirTemp made it private; results directories are not.
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	os.Remove(out) // empty, if it is there: rename replaces only an empty directory
	if err := os.Rename(work, out); err != nil {
		return fmt.Errorf("--out %s: %w", out, unwrapPath(err))
	}
	a.summary(adv)
	if a.Table {
		apptable.Summarized(runs, c.Names(), c.Contention, c.Arms).Print(a.Stdout, io.Discard, nil)
	}
	fmt.Fprintf(a.Stderr, "advise: results in %s (vgpu-probe report %s)\n", out, filepath.Join(out, results.Name))
	return nil
}

// firstRun runs the command once as it is (probe) and returns the arms
// that can apply to it, with the A/A pair; nil (and the line said on
// stdout) where no way can. It says what the program showed, the ways
// left out and why, and, where --cpus was not given, sets a.CPUs to the
// threads it kept busy, at most the CPUs this process may use.
func (a *Config) firstRun(ctx context.Context) ([]string, error) {
	name := suite.ProgramName(a.Command[0])
	fmt.Fprintf(a.Stderr, "advise: a first run of %s as it is, to see what it uses\n", name)
	u := probe(ctx, a.Command)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if u.Err != nil {
		return nil, BadInput{fmt.Errorf("%s failed as it is (%s): advise needs a command that runs", name, u.Err)}
	}
	if !u.Seen {
		// Ended before its libraries could be read: every way is run.
		u.CUDA, u.OpenMP = true, "unknown"
		fmt.Fprintf(a.Stderr, "advise: %s ended in %s, before what it loads could be read: every way is measured\n", name, u.Wall.Round(time.Millisecond))
	} else {
		fmt.Fprintf(a.Stderr, "advise: %s took %s with %s loaded, %d busy thread(s)\n", name, u.Wall.Round(time.Millisecond), u.Words(), u.Threads)
	}
	arms, skipped := applicable(u, a.Launcher != "")
	if len(arms) == 2 {
		fmt.Fprintf(a.Stdout, "No way applies: %s loaded %s in a first run as it is; the ways change CUDA's and OpenMP's waits only\n", name, u.Words())
		return nil, nil
	}
	if len(skipped) > 0 {
		fmt.Fprintf(a.Stderr, "advise: left out, as %s loaded %s: %s\n", name, u.Words(), strings.Join(skipped, ", "))
	}
	if a.CPUs == 0 {
		online, err := corunner.Online()
		if err != nil {
			return nil, err
		}
		a.CPUs = max(1, min(u.Threads, len(online)))
		fmt.Fprintf(a.Stderr, "advise: --cpus %d: the threads it kept busy, of the %d CPUs it may use\n", a.CPUs, len(online))
	}
	return arms, nil
}

// applicable are the arms that can change how the program waits: the
// CUDA ways where it loaded CUDA, the launcher where it loaded CUDA or
// an OpenMP runtime (and there is a launcher); with the A/A pair where
// any is left. skipped are the others, each with why.
func applicable(u Uses, launcher bool) (arms, skipped []string) {
	for _, arm := range allArms {
		switch {
		case arm == "cuda-blocking" || arm == "hybridsync":
			if !u.CUDA {
				skipped = append(skipped, arm+" (no CUDA)")
				continue
			}
		case arm == "hybridsync-run":
			if !launcher {
				continue // FindParts said so
			}
			if !u.CUDA && u.OpenMP == "" {
				skipped = append(skipped, arm+" (neither CUDA nor OpenMP)")
				continue
			}
		}
		arms = append(arms, arm)
	}
	return arms, skipped
}

// workPrefix names the directories advise writes into before renaming
// them to --out, with the writer's pid: one whose writer is gone (killed)
// is removed by the next advise in the same folder.
const workPrefix = ".vgpu-probe-advise-"

// outDir is --out as an absolute path (the default if ""), checked: empty
// or absent, its folder one advise can write in; the work directories
// that advise processes now gone left there are removed.
func outDir(out string) (string, error) {
	if out == "" {
		out = results.DefaultDir(results.KindAdvise, time.Now())
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return "", fmt.Errorf("--out %s: %w", out, err)
	}
	if ents, err := os.ReadDir(abs); err == nil && len(ents) > 0 {
		return "", fmt.Errorf("--out %s: not empty; pick another directory", abs)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("--out %s: %v", abs, unwrapPath(err))
	}
	removeStale(filepath.Dir(abs))
	probe, err := os.MkdirTemp(filepath.Dir(abs), workPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("--out %s: cannot write in %s: %v", abs, filepath.Dir(abs), unwrapPath(err))
	}
	os.Remove(probe)
	return abs, nil
}

// workDir makes the directory the runs go to, beside out, renamed to it
// at the end, so that a failure leaves nothing behind.
func workDir(out string) (string, error) {
	parent := filepath.Dir(out)
	work, err := os.MkdirTemp(parent, workPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("--out %s: cannot write in %s: %v", out, parent, unwrapPath(err))
	}
	if err := os.Mkdir(filepath.Join(work, "stats"), 0o755); err != nil {
		os.RemoveAll(work)
		return "", err
	}
	return work, nil
}

// removeStale removes the work directories in parent whose advise process
// is gone.
func removeStale(parent string) {
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), workPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, fs.ErrNotExist) {
			os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
}

// unwrapPath is err without the path an *os.PathError names, which may
// be a temporary one the user never gave.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// errMaxTime is the cause of the context that --max-time ends.
var errMaxTime = errors.New("--max-time reached")

// repeat runs repetitions until the advice is decided (after MinReps)
// or MaxReps or MaxTime is reached (ctx ends with errMaxTime: the
// repetition under way is stopped and left out); it returns the runs of
// the repetitions that ended, how many, and why it stopped early where
// that was an error or an interruption (the runs so far still count).
func (a *Config) repeat(ctx context.Context, c *suite.Config, work string) ([]suite.Run, int, error) {
	if n := suite.OMPEnvNote(c.Arms); n != "" {
		fmt.Fprintln(a.Stderr, "advise:", n)
	}
	f, isFile := a.Stderr.(*os.File)
	onTerminal := isFile && term.IsTerminal(int(f.Fd()))
	r := repeater{a: a, c: c, work: work, arms: slices.Clone(c.Arms), bar: progress.New(a.Stderr), lines: !onTerminal}
	r.bar.Begin(a.MaxReps * len(c.Arms) * len(c.Contention))
	defer r.bar.Finish(true)
	start := time.Now()
	deadline, bounded := ctx.Deadline()
	var longest time.Duration
	for rep := range a.MaxReps {
		// A repetition that would not end in time is not started.
		if rep > 0 && bounded && time.Now().Add(longest).After(deadline) {
			fmt.Fprintf(a.Stderr, "advise: stopped by --max-time %v after %d repetitions\n", a.MaxTime, rep)
			return r.runs, rep, nil
		}
		repStart := time.Now()
		if err := r.one(ctx, rep); err != nil {
			if errors.Is(context.Cause(ctx), errMaxTime) {
				fmt.Fprintf(a.Stderr, "advise: stopped by --max-time %v in repetition %d: the advice stands on the repetitions that ended, %d\n", a.MaxTime, rep+1, rep)
				return r.runs, rep, nil
			}
			if ctx.Err() != nil {
				fmt.Fprintf(a.Stderr, "advise: interrupted: the advice stands on the repetitions that ended, %d\n", rep)
				return r.runs, rep, ctx.Err()
			}
			return nil, 0, err
		}
		longest = max(longest, time.Since(repStart))
		adv := adviceOf(r.runs, c)
		if !onTerminal {
			fmt.Fprintf(a.Stderr, "advise: %d of at most %d repetitions, %s: %s\n", rep+1, a.MaxReps,
				time.Since(start).Round(time.Second), status(&adv))
		}
		if rep+1 >= a.MinReps && adv.Decided {
			return r.runs, rep + 1, nil
		}
	}
	return r.runs, a.MaxReps, nil
}

// repeater is repeat's state: the runs of the repetitions that ended,
// and the ways still run.
type repeater struct {
	a    *Config
	c    *suite.Config
	work string
	arms []string
	runs []suite.Run
	bar  *progress.Bar
	done int
	// lines: a line per run on stderr, which is no terminal to draw
	// the bar on.
	lines bool
}

// one runs repetition rep: every way still run in each setting, in an
// order that rotates. Its runs join r.runs only if it ends.
func (r *repeater) one(ctx context.Context, rep int) error {
	p := r.c.Programs[0]
	var runs []suite.Run
	for ci, setting := range r.c.Contention {
		order := suite.Rotate(r.c.Arms, rep+ci)
		for _, arm := range order {
			if !slices.Contains(r.arms, arm) {
				continue
			}
			r.bar.Next(fmt.Sprintf("rep %d %s %s", rep+1, setting, arm))
			rs, err := r.c.RunCell(ctx, p, setting, rep, []string{arm}, r.work, r.done, 0)
			if ctx.Err() != nil {
				// Ctrl-C reaches the program too: its run is no failure.
				return ctx.Err()
			}
			if err != nil {
				return err
			}
			r.bar.Advance()
			r.done++
			for _, run := range rs {
				run.Order = slices.Index(order, arm)
				runs = append(runs, run)
				if r.lines {
					fmt.Fprintf(r.a.Stderr, "advise: rep %d %-14s %-18s %s\n", rep+1, setting, arm, runWords(run))
				}
				if err := r.failed(run, rep); err != nil {
					return err
				}
			}
		}
	}
	r.runs = append(r.runs, runs...)
	return nil
}

// runWords is a run's time per step (or whole), or why it failed.
func runWords(r suite.Run) string {
	switch {
	case !r.OK():
		return "FAILED: " + r.Error
	case r.Steps > 0:
		return fmt.Sprintf("%.1f µs/step", r.PerStep()*1e6)
	}
	return fmt.Sprintf("%.2f s", r.WallS)
}

// failed judges a failed run: the program failing as it is ends advise
// (bad input in the first repetition); failing in a way leaves that way
// out.
func (r *repeater) failed(run suite.Run, rep int) error {
	if run.OK() {
		return nil
	}
	name := r.c.Programs[0].Name
	if run.Arm == decide.AsIs || run.Arm == decide.Again {
		err := fmt.Errorf("%s failed as it is (%s, %s): advise needs a command that runs", name, run.Contention, run.Error)
		if rep == 0 {
			return BadInput{err}
		}
		return err
	}
	r.arms = slices.DeleteFunc(r.arms, func(s string) bool { return s == run.Arm })
	fmt.Fprintf(r.a.Stderr, "advise: %s failed under %s (%s): that way is left out\n", name, run.Arm, run.Error)
	return nil
}

// adviceOf decides from the runs so far.
func adviceOf(runs []suite.Run, c *suite.Config) decide.Advice {
	return decide.FromRuns(runs, c.Arms, c.Contention)
}

// status is a repetition's progress line: the lead way's median ratio
// and standing in each setting, and whether it is decided.
func status(a *decide.Advice) string {
	var lead *decide.WayVerdict
	for i, w := range a.Ways {
		if !w.Excluded && (lead == nil || w.Score < lead.Score) {
			lead = &a.Ways[i]
		}
	}
	state := "open"
	if a.Decided {
		state = "decided"
	}
	if lead == nil {
		return "no way can be better than as it is, " + state
	}
	return fmt.Sprintf("%s %s of as it is; %s", lead.Arm, standings(lead), state)
}

// standings are a way's median ratio, interval and standing in each
// setting.
func standings(w *decide.WayVerdict) string {
	var parts []string
	for _, j := range w.In {
		p := "-"
		if j.Paired != nil {
			p = fmt.Sprintf("%.3f [%.3f, %.3f]", j.Paired.Median, j.Paired.CI[0], j.Paired.CI[1])
		}
		parts = append(parts, fmt.Sprintf("%s %s %s (won %d, lost %d of %d)", j.Setting, p, j.Is, j.Sign.Wins, j.Sign.Losses, j.Sign.N))
	}
	return strings.Join(parts, ", ")
}

// summary writes each way's ratios and standing to stderr.
func (a *Config) summary(adv *decide.Advice) {
	for i, w := range adv.Ways {
		line := standings(&adv.Ways[i])
		if w.Failed != "" {
			line = "failed: " + w.Failed
		}
		fmt.Fprintf(a.Stderr, "advise: %-14s %s\n", w.Arm, line)
	}
}

// runWith returns the command line of each way, as the user would type
// it.
func (a *Config) runWith(c *suite.Config) map[string]string {
	cmd := suite.ShellWords(a.Command)
	return map[string]string{
		"cuda-blocking":  fmt.Sprintf("in CUDA's blocking-sync mode (`LD_PRELOAD=%s %s`, or cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) at its start)", suite.ShellWords([]string{c.Blocksync}), cmd),
		"hybridsync":     fmt.Sprintf("with `LD_PRELOAD=%s %s`", suite.ShellWords([]string{c.Lib}), cmd),
		"hybridsync-run": fmt.Sprintf("with `%s %s`", suite.ShellWords([]string{c.Launcher}), cmd),
	}
}

// writeAdvice writes the runs, the summary, the results document (of
// the reps repetitions that ran) and the advice into dir, which becomes
// out.
func writeAdvice(dir, out string, runs []suite.Run, reps int, c *suite.Config, adv *decide.Advice) error {
	var jl []byte
	for _, r := range runs {
		b, _ := json.Marshal(r)
		jl = append(append(jl, b...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, suite.RunsName), jl, 0o644); err != nil {
		return err
	}
	doc := suite.ResultsFile(runs, c.Names(), c.Contention, c.Arms, reps, 0, 0, results.ThisMachine())
	doc.Apps.CPU, doc.Apps.Out = c.CPU, out
	if _, err := suite.WriteResults(dir, doc); err != nil {
		return err
	}
	return results.WriteJSON(filepath.Join(dir, "advice.json"), adv)
}
