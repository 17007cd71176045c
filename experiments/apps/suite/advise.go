package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/progress"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/decide"
)

// AdviseHelp is `vgpu-probe advise`'s help.
const AdviseHelp = `advise answers "should I run my program as it is, in CUDA's blocking-sync
mode, under libhybridsync, or with hybridsync-run, on this VM?" by running
it every way, alone and beside a busy loop on its CPUs, and ends with one
line on stdout: how to run it, by how much that gains with its interval,
or that no way is measurably better than as it is.

The ways (apps' arms): cuda-default (the command as it is), cuda-blocking
(LD_PRELOAD=--blocksync, CUDA's blocking-sync mode), hybridsync
(LD_PRELOAD=--lib), hybridsync-run (the command under --launcher, left out
with a note if there is none), and cuda-default-again, the command as it is
once more: the A/A control, whose ratio to cuda-default is the noise of the
machine and the method. Each repetition runs every way back to back, in an
order that rotates, alone on one CPU (none) and beside a busy loop pinned to
it (while1); --cpus N runs on N CPUs with a busy loop on each (nonexN,
while1xN), for programs of several threads. A way's paired ratio (its time
over cuda-default's in the same repetition; per step when the program
prints apps' result line, else the whole run) has an interval that assumes
nothing of the distribution; the noise of a setting is the width of the A/A
interval (at least 1%).

The rule:

` + decide.Rule + `

The parts are found beside the binary (build/lib, build/bin from make in
the source tree; PREFIX/lib, PREFIX/bin from make install), or given with
--lib, --blocksync and --launcher. A program that fails as it is, on the
first run, stops it with an error; one that fails in another way leaves
that way out. Results go to --out (default results/advise-TIMESTAMP in the
working directory, the time in UTC, as run, bench and apps write):
runs.jsonl, summary.json, advice.json, and results.json for vgpu-probe
report, which shows the paired table; nothing is left there on failure.`

// AdviseConfig is one advise: the command and its bounds.
type AdviseConfig struct {
	Command []string // the program and its arguments
	CPUs    int      // 1 (none, while1) or N (nonexN, while1xN)
	CPU     int      // the highest of its CPUs; -1: the last this process may use
	Parts
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

// adviseArms are the arms advise runs, the A/A control among the ways,
// so that its distance in time from cuda-default is like theirs.
var adviseArms = []string{"cuda-default", "cuda-blocking", "cuda-default-again", "hybridsync", "hybridsync-run"}

// settings returns the settings alone and beside the busy loop.
func (a *AdviseConfig) settings() (alone, contended string) {
	if a.CPUs <= 1 {
		return "none", "while1"
	}
	return aloneOn(a.CPUs), fmt.Sprintf("while1x%d", a.CPUs)
}

// config is the suite's matrix for the command.
func (a *AdviseConfig) config() (*Config, error) {
	switch {
	case len(a.Command) == 0 || a.Command[0] == "":
		return nil, errors.New("no command: give it after --, as in vgpu-probe advise [flags] -- CMD ARGS")
	case a.MaxReps < 1 || a.MinReps < 1:
		return nil, errors.New("--min-reps and --max-reps must be positive")
	case a.MaxTime <= 0:
		return nil, errors.New("--max-time must be positive")
	case a.CPUs < 1:
		return nil, errors.New("--cpus must be positive")
	}
	if online, err := corunner.Online(); err == nil && a.CPUs > len(online) {
		return nil, fmt.Errorf("--cpus %d: this process may use %d CPUs (%v)", a.CPUs, len(online), online)
	}
	alone, contended := a.settings()
	arms := slices.Clone(adviseArms)
	if a.Launcher == "" {
		arms = slices.DeleteFunc(arms, func(s string) bool { return s == "hybridsync-run" })
	}
	c := &Config{Programs: []Program{{Name: programName(a.Command[0]), Command: quoteWords(a.Command)}},
		Dir: ".", Arms: arms, Contention: []string{alone, contended}, Reps: a.MaxReps, CPU: a.CPU,
		Lib: a.Lib, Blocksync: a.Blocksync, Launcher: a.Launcher, Timeout: a.MaxTime,
		CapQuota: 10 * time.Millisecond, CapPeriod: 20 * time.Millisecond, Log: io.Discard}
	if err := c.Check(); err != nil {
		return nil, err
	}
	return c, nil
}

// Advise runs the command in every way until the advice is decided or a
// bound is reached, writes the results to a.Out, prints the line on
// a.Stdout and returns the advice.
func Advise(ctx context.Context, a *AdviseConfig) (*decide.Advice, error) {
	c, err := a.config()
	if err != nil {
		return nil, BadInput{err}
	}
	out := a.Out
	if out == "" {
		out = results.DefaultDir(results.KindAdvise, time.Now())
	}
	if out, err = filepath.Abs(out); err != nil {
		return nil, BadInput{fmt.Errorf("--out: %w", err)}
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		return nil, BadInput{fmt.Errorf("--out %s: not empty; pick another directory", out)}
	}
	// The runs go to a directory beside out, renamed to it at the end,
	// so that a failure or Ctrl-C leaves nothing behind.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	work, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	defer os.RemoveAll(work)
	if err := os.Mkdir(filepath.Join(work, "stats"), 0o755); err != nil {
		return nil, err
	}
	runs, reps, err := a.repeat(ctx, c, work)
	if err != nil {
		return nil, err
	}
	adv := adviceOf(runs, c)
	for i := range runs {
		if runs[i].Stats != "" {
			runs[i].Stats = filepath.Join(out, strings.TrimPrefix(runs[i].Stats, work))
		}
	}
	if err := writeAdvice(work, out, runs, c, &adv); err != nil {
		return nil, err
	}
	// MkdirTemp made it private; results directories are not.
	if err := os.Chmod(work, 0o755); err != nil {
		return nil, err
	}
	os.Remove(out) // empty, if it is there: rename replaces only an empty directory
	if err := os.Rename(work, out); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	a.summary(&adv)
	if a.Table {
		apptable.Summarized(runs, c.Names(), c.Contention, c.Arms).Print(a.Stdout, io.Discard, nil)
	}
	fmt.Fprintf(a.Stderr, "advise: results in %s (vgpu-probe report %s)\n", out, filepath.Join(out, results.Name))
	fmt.Fprintln(a.Stdout, adv.Line(a.runWith(c), decide.Measured{Reps: reps, CPUs: a.CPUs}))
	return &adv, nil
}

// repeat runs repetitions until the advice is decided (after MinReps)
// or MaxReps or MaxTime is reached; it returns the runs and how many
// repetitions ran.
func (a *AdviseConfig) repeat(ctx context.Context, c *Config, work string) ([]Run, int, error) {
	p := c.Programs[0]
	arms := slices.Clone(c.Arms)
	if n := ompEnvNote(arms); n != "" {
		fmt.Fprintln(a.Stderr, "advise:", n)
	}
	bar := progress.New(a.Stderr)
	bar.Begin(a.MaxReps * len(arms) * len(c.Contention))
	finished := false
	defer func() { bar.Finish(finished) }()
	f, isFile := a.Stderr.(*os.File)
	onTerminal := isFile && term.IsTerminal(int(f.Fd()))
	var runs []Run
	start := time.Now()
	var longest time.Duration
	done := 0
	for rep := range a.MaxReps {
		if rep > 0 && time.Since(start)+longest > a.MaxTime {
			fmt.Fprintf(a.Stderr, "advise: stopped by --max-time %v after %d repetitions\n", a.MaxTime, rep)
			finished = true
			return runs, rep, nil
		}
		repStart := time.Now()
		for ci, setting := range c.Contention {
			for _, arm := range rotate(c.Arms, rep+ci) {
				if !slices.Contains(arms, arm) {
					continue
				}
				bar.Next(fmt.Sprintf("rep %d %s %s", rep+1, setting, arm))
				rs, err := c.runCell(ctx, p, setting, rep, []string{arm}, work, done, 0)
				if err != nil {
					return nil, 0, err
				}
				bar.Advance()
				done++
				for _, r := range rs {
					r.Order = slices.Index(rotate(c.Arms, rep+ci), arm)
					runs = append(runs, r)
					if r.OK() {
						continue
					}
					if arm == "cuda-default" || arm == "cuda-default-again" {
						err := fmt.Errorf("%s failed as it is (%s, %s): advise needs a command that runs", p.Name, setting, r.Error)
						if rep == 0 {
							err = BadInput{err}
						}
						return nil, 0, err
					}
					arms = slices.DeleteFunc(arms, func(s string) bool { return s == arm })
					fmt.Fprintf(a.Stderr, "advise: %s failed under %s (%s): that way is left out\n", p.Name, arm, r.Error)
				}
			}
		}
		longest = max(longest, time.Since(repStart))
		adv := adviceOf(runs, c)
		if !onTerminal {
			fmt.Fprintf(a.Stderr, "advise: %d of at most %d repetitions, %s: %s\n", rep+1, a.MaxReps,
				time.Since(start).Round(time.Second), status(&adv))
		}
		if rep+1 >= min(a.MinReps, a.MaxReps) && adv.Decided {
			finished = true
			return runs, rep + 1, nil
		}
	}
	finished = true
	return runs, a.MaxReps, nil
}

// adviceOf decides from the runs so far.
func adviceOf(runs []Run, c *Config) decide.Advice {
	return decide.FromRuns(runs, c.Arms, c.Contention[0], c.Contention[1])
}

// status is a repetition's progress line: the lead way's medians and
// whether it is decided.
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
	if lead == nil || lead.Alone == nil || lead.Contended == nil {
		return fmt.Sprintf("no way ahead of as it is (noise ±%s alone, ±%s contended), %s", decide.Percent(a.NoiseAlone), decide.Percent(a.NoiseContended), state)
	}
	return fmt.Sprintf("%s %.3f alone (%s), %.3f contended (%s) of as it is; noise ±%s, ±%s; %s", lead.Arm,
		lead.Alone.Median, lead.AloneIs, lead.Contended.Median, lead.ContendedIs, decide.Percent(a.NoiseAlone), decide.Percent(a.NoiseContended), state)
}

// summary writes each way's ratios and standing to stderr.
func (a *AdviseConfig) summary(adv *decide.Advice) {
	show := func(p *Paired) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.3f [%.3f, %.3f]", p.Median, p.CI[0], p.CI[1])
	}
	for _, w := range adv.Ways {
		line := fmt.Sprintf("alone %s %s, contended %s %s", show(w.Alone), w.AloneIs, show(w.Contended), w.ContendedIs)
		if w.Failed != "" {
			line = "failed: " + w.Failed
		}
		fmt.Fprintf(a.Stderr, "advise: %-14s %s\n", w.Arm, line)
	}
}

// runWith returns the command line of each way, as the user would type
// it.
func (a *AdviseConfig) runWith(c *Config) map[string]string {
	cmd := shellWords(a.Command)
	return map[string]string{
		"cuda-blocking":  fmt.Sprintf("in CUDA's blocking-sync mode (`LD_PRELOAD=%s %s`, or cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) at its start)", shellWords([]string{c.Blocksync}), cmd),
		"hybridsync":     fmt.Sprintf("with `LD_PRELOAD=%s %s`", shellWords([]string{c.Lib}), cmd),
		"hybridsync-run": fmt.Sprintf("with `%s %s`", shellWords([]string{c.Launcher}), cmd),
	}
}

// writeAdvice writes the runs, the summary, the results document and
// the advice into dir, which becomes out.
func writeAdvice(dir, out string, runs []Run, c *Config, adv *decide.Advice) error {
	var jl []byte
	for _, r := range runs {
		b, _ := json.Marshal(r)
		jl = append(append(jl, b...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, RunsName), jl, 0o644); err != nil {
		return err
	}
	doc := ResultsFile(runs, c.Names(), c.Contention, c.Arms, c.Reps, 0, 0, results.ThisMachine())
	doc.Apps.CPU, doc.Apps.Out = c.CPU, out
	if _, err := WriteResults(dir, doc); err != nil {
		return err
	}
	return results.WriteJSON(filepath.Join(dir, "advice.json"), adv)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// programName is the program's name in the results: its file's name in
// the characters a program name may have.
func programName(argv0 string) string {
	n := unsafeName.ReplaceAllString(filepath.Base(argv0), "_")
	if !nameRE.MatchString(n) {
		n = "p" + n
	}
	return n
}

// quoteWords quotes every word so that SplitWords gives them back.
func quoteWords(argv []string) string {
	q := make([]string, len(argv))
	for i, w := range argv {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellWords is argv as a shell command line: words quoted only where
// they need it.
func shellWords(argv []string) string {
	q := make([]string, len(argv))
	for i, w := range argv {
		q[i] = w
		if !plainWord.MatchString(w) {
			q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
