package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// RunsName is the file Run writes its runs to, one JSON line each, as
// they finish.
const RunsName = "runs.jsonl"

// ErrExists means the output directory holds runs already.
var ErrExists = errors.New("has a " + RunsName + " already; pick another directory")

// Run runs the matrix of c (Checked) and writes every run to
// out/runs.jsonl as it finishes, and each hybridsync run's statistics
// under out/stats. It returns the runs made, also on error.
func (c *Config) Run(ctx context.Context, out string) ([]Run, error) {
	if c.Log == nil {
		c.Log = io.Discard
	}
	if _, err := os.Stat(filepath.Join(out, RunsName)); err == nil {
		return nil, fmt.Errorf("--out %s: %w", out, ErrExists)
	}
	if err := os.MkdirAll(filepath.Join(out, "stats"), 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	jf, err := os.OpenFile(filepath.Join(out, RunsName), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	defer jf.Close()
	if err := c.startAgent(ctx); err != nil {
		return nil, err
	}
	if c.feed != nil {
		defer func() { c.feed.Close(); c.feed = nil }()
	}

	for _, l := range c.skipped() {
		fmt.Fprintln(c.Log, "apps:", l)
	}
	for _, n := range []string{OMPEnvNote(c.Arms)} {
		if n != "" {
			fmt.Fprintln(c.Log, "apps:", n)
		}
	}
	var runs []Run
	total := 0 // processes, for the progress lines
	for _, p := range c.Programs {
		for _, s := range c.Contention {
			if p.runsUnder(s) {
				total += c.Reps * p.processes(len(c.Arms))
			}
		}
	}
	started := 0
	for rep := range c.Reps {
		// Programs too run in an order that rotates: variants of one
		// program given as separate programs (with and without an
		// environment variable, say) are compared by repetition, and
		// the first run of a repetition must not always be the same one.
		for pi, p := range Rotate(c.Programs, rep) {
			for ci, setting := range c.Contention {
				if !p.runsUnder(setting) {
					continue
				}
				var rs []Run
				var err error
				if p.InProcess {
					rs, err = c.runInProcess(ctx, p, setting, rep, out, started, total)
				} else {
					rs, err = c.RunCell(ctx, p, setting, rep, Rotate(c.Arms, rep+pi+ci), out, started, total)
				}
				started += p.processes(len(c.Arms))
				for _, r := range rs {
					b, _ := json.Marshal(r)
					jf.Write(append(b, '\n'))
				}
				runs = append(runs, rs...)
				if err != nil {
					return runs, err
				}
			}
		}
	}
	return runs, nil
}

// The runs and their table are results/apptable': report computes the same
// table from the same rows.
type (
	Run       = apptable.Run
	Row       = apptable.Row
	ArmResult = apptable.ArmResult
	Paired    = apptable.Paired
	Limit     = apptable.Limit
	Summary   = apptable.Summary
)

// AgentSettings are the agent settings of runs (apptable.AgentSettings):
// tables of runs made under different settings are not comparable.
func AgentSettings(rs []Run) []string { return apptable.AgentSettings(rs) }
