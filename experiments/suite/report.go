package suite

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/vgpu-probe/vgpu-probe/results"
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
	for _, n := range []string{ompEnvNote(c.Arms), c.launcherNote()} {
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
		for pi, p := range rotate(c.Programs, rep) {
			for ci, setting := range c.Contention {
				if !p.runsUnder(setting) {
					continue
				}
				var rs []Run
				var err error
				if p.InProcess {
					rs, err = c.runInProcess(ctx, p, setting, rep, out, started, total)
				} else {
					rs, err = c.runCell(ctx, p, setting, rep, rotate(c.Arms, rep+pi+ci), out, started, total)
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

// Summary is the JSON output and summary.json.
type Summary struct {
	CPU  int `json:"cpu"`
	Reps int `json:"reps"`
	// Agent is the runs' agent setting (Run.Agent); "" none.
	Agent    string `json:"agent,omitempty"`
	Results  []Row  `json:"results"`
	Failures []Run  `json:"failures"`
	Out      string `json:"out"`
	runs     int
}

// Summarized returns runs' table (Summarize) and failed runs.
func Summarized(runs []Run, programs, contentions, arms []string) Summary {
	s := Summary{Results: Summarize(runs, programs, contentions, arms), Failures: []Run{}, runs: len(runs)}
	if a := AgentSettings(runs); len(a) == 1 {
		s.Agent = a[0]
	}
	for _, r := range runs {
		if !r.OK() {
			s.Failures = append(s.Failures, r)
		}
	}
	return s
}

// Write writes the summary as JSON to path, whole or not at all.
func (s Summary) Write(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return results.WriteAtomic(path, append(b, '\n'))
}

// Print prints the table, or the JSON, to w, and lists the failed runs on
// log, which make it return an error.
func (s Summary) Print(w, log io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return err
		}
	} else {
		if err := PrintTable(w, s.Results); err != nil {
			return err
		}
		// The table's ratios have their own reference; say which.
		fmt.Fprintln(log, "apps: an arm's ratio is its median wall time per step over the program's fastest arm alone on as many CPUs (contention none, or nonexN for the settings xN), [min-max] over its runs")
	}
	for _, r := range s.Failures {
		fmt.Fprintf(log, "apps: FAILED %s %s %s rep %d: %s\n", r.Program, r.Contention, r.Arm, r.Rep+1, r.Error)
	}
	if len(s.Failures) > 0 {
		return fmt.Errorf("%d of %d runs failed (left out of the medians)", len(s.Failures), s.runs)
	}
	return nil
}

// ReadRuns reads runs.jsonl files of earlier runs, taken together.
// Repetitions pair runs of one file only: each file's are numbered after
// the previous files' (two files' repetition 0 ran at different times,
// perhaps on different machines).
func ReadRuns(paths []string) ([]Run, error) {
	var runs []Run
	offset := 0
	for _, path := range paths {
		rs, err := readRuns(path)
		if err != nil {
			return nil, err
		}
		next := offset
		for i := range rs {
			rs[i].Rep += offset
			next = max(next, rs[i].Rep+1)
		}
		offset = next
		runs = append(runs, rs...)
	}
	return runs, nil
}

// Present returns what runs hold: programs in the order they first
// appear, settings and arms in their usual order (settings by their
// number of CPUs, then as corunner.Contentions).
func Present(runs []Run) (programs, contentions, arms []string) {
	armSet := map[string]bool{}
	for _, r := range runs {
		if !slices.Contains(programs, r.Program) {
			programs = append(programs, r.Program)
		}
		if !slices.Contains(contentions, r.Contention) {
			contentions = append(contentions, r.Contention)
		}
		armSet[r.Arm] = true
	}
	sortSettings(contentions)
	return programs, contentions, slices.DeleteFunc(slices.Clone(AllArms), func(a string) bool { return !armSet[a] })
}

// readRuns reads one runs.jsonl; a line that is not a run is an error
// naming the file and line.
func readRuns(path string) ([]Run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return scanRuns(path, f)
}

// ParseRuns parses the bytes of a runs.jsonl (name is what errors call
// it); a line that is not a run is an error naming it.
func ParseRuns(name string, b []byte) ([]Run, error) {
	return scanRuns(name, bytes.NewReader(b))
}

func scanRuns(name string, rd io.Reader) ([]Run, error) {
	var runs []Run
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r Run
		if err := json.Unmarshal(line, &r); err != nil || r.Program == "" || r.Arm == "" || r.Contention == "" {
			return nil, fmt.Errorf("%s:%d: not a run of vgpu-probe apps", name, n)
		}
		runs = append(runs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return runs, nil
}
