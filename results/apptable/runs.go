// Package apptable is the rows of runs.jsonl that vgpu-probe apps and advise
// write, one per run of a program in an arm under a contention setting,
// and the table computed from them: per arm the medians and ratios to
// the program's fastest arm alone, and the paired ratios by repetition
// (an arm over cuda-default of the same repetition, and the A/A control
// cuda-default-again over cuda-default) with confidence intervals from
// order statistics. apps prints it, and vgpu-probe report computes it
// from runs.jsonl files and from the runs an apps results document
// carries, so that both give the same numbers.
package apptable

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ArmOrder is every arm apps knows, in the order its table gives them.
var ArmOrder = []string{"cuda-default", "cuda-blocking", "hybridsync", "hybridsync-linked", "cuda-default-again", "omp-passive", "omp-spin1k", "hybridsync-run", "hybridsync-run-live"}

// SettingOrder is the order of the contention settings on one CPU (those
// of experiments/corunner.Contentions), which the table sorts by.
var SettingOrder = []string{"none", "while1", "cap", "cap+while1"}

// Patterns are how a setting's busy loops come and go, named by a
// suffix "-PATTERN" of the setting's name (while1x4-late): start, in
// place before the program starts; late, from the program's ready line;
// 1s and 10s, from the start, on for that long, then off as long, and so
// on. A name without one puts them in place at the ready line of a
// program that has one, else at the start.
var Patterns = []string{"start", "late", "1s", "10s"}

// SplitPattern takes a setting's pattern off its name: the rest, and the
// pattern ("" for none).
func SplitPattern(name string) (rest, pattern string) {
	if i := strings.LastIndexByte(name, '-'); i > 0 && slices.Contains(Patterns, name[i+1:]) {
		return name[:i], name[i+1:]
	}
	return name, ""
}

// Setting takes a contention setting's name apart: the setting on each
// CPU and the number of CPUs, N of a name ending in "xN" (N from 2), else
// 1, whatever its pattern. Names are checked where they are given (apps
// --contention); a name read from a file that is not of that form is a
// setting on one CPU.
func Setting(name string) (base string, cpus int) {
	name, _ = SplitPattern(name)
	if i := strings.LastIndexByte(name, 'x'); i > 0 && i < len(name)-1 && name[i+1] >= '1' && name[i+1] <= '9' {
		if n, err := strconv.Atoi(name[i+1:]); err == nil && n > 1 {
			return name[:i], n
		}
	}
	return name, 1
}

// SettingCPUs is the number of CPUs of the setting called name.
func SettingCPUs(name string) int {
	_, n := Setting(name)
	return n
}

// Alone reports whether the setting called name runs the program alone
// (none, or nonexN): the reference of the settings on as many CPUs.
func Alone(name string) bool {
	b, _ := Setting(name)
	return b == "none"
}

// AloneOn is the name of the setting alone on n CPUs.
func AloneOn(n int) string {
	if n == 1 {
		return "none"
	}
	return fmt.Sprintf("nonex%d", n)
}

// SortSettings sorts setting names by their number of CPUs, then in
// SettingOrder; unknown names last, as they are.
func SortSettings(names []string) {
	rank := func(n string) int {
		b, _ := Setting(n)
		if i := slices.Index(SettingOrder, b); i >= 0 {
			return i
		}
		return len(SettingOrder)
	}
	slices.SortStableFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(SettingCPUs(a), SettingCPUs(b)), cmp.Compare(rank(a), rank(b)))
	})
}

// AgentSettings are the agent settings the runs were made under
// (Run.Agent), each once, in the order they first appear.
func AgentSettings(runs []Run) []string {
	var out []string
	for _, r := range runs {
		if !slices.Contains(out, r.Agent) {
			out = append(out, r.Agent)
		}
	}
	return out
}

// Summary is apps' part of its results document (results.File.Apps), and
// summary.json: the table, the failed runs and the runs.
type Summary struct {
	CPU  int `json:"cpu"`
	Reps int `json:"reps"`
	// Agent is the runs' agent setting (Run.Agent); "" none.
	Agent    string `json:"agent,omitempty"`
	Results  []Row  `json:"results"`
	Failures []Run  `json:"failures"`
	Out      string `json:"out"`
	// Runs are the rows the table is computed from, failed ones
	// included: what report computes it again from.
	Runs []Run `json:"runs,omitempty"`
}

// Summarized returns runs' table (Summarize) and failed runs.
func Summarized(runs []Run, programs, contentions, arms []string) Summary {
	s := Summary{Results: Summarize(runs, programs, contentions, arms), Failures: []Run{}, Runs: runs}
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

// TableNote says what the table's ratios are against.
const TableNote = "an arm's ratio is its median wall time per step over the program's fastest arm alone on as many CPUs (contention none, or nonexN for the settings xN), [min-max] over its runs; " +
	"paired: the median over repetitions of hybridsync's time over the other arm's of the same repetition (or round), with its order-statistics interval and level; A/A paired: cuda-default-again over cuda-default"

// Print prints the table to w, or where encode is not nil calls it
// instead (apps --json prints the results document), and lists the
// failed runs on log, which make it return an error.
func (s Summary) Print(w, log io.Writer, encode func(io.Writer) error) error {
	if encode != nil {
		if err := encode(w); err != nil {
			return err
		}
	} else {
		if err := PrintTable(w, s.Results); err != nil {
			return err
		}
		// The table's ratios have their own reference; say which.
		fmt.Fprintln(log, "apps: "+TableNote)
	}
	for _, r := range s.Failures {
		fmt.Fprintf(log, "apps: FAILED %s %s %s rep %d: %s\n", r.Program, r.Contention, r.Arm, r.Rep+1, r.Error)
	}
	if len(s.Failures) > 0 {
		return fmt.Errorf("%d of %d runs failed (left out of the medians)", len(s.Failures), len(s.Runs))
	}
	return nil
}

// ReadRuns reads runs.jsonl files of earlier runs, taken together.
// Repetitions pair runs of one file only: each file's are numbered after
// the previous files' (two files' repetition 0 ran at different times,
// perhaps on different machines).
func ReadRuns(paths []string) ([]Run, error) {
	var files [][]Run
	for _, path := range paths {
		rs, err := readRuns(path)
		if err != nil {
			return nil, err
		}
		files = append(files, rs)
	}
	return Combine(files), nil
}

// Combine takes the runs of several files together, as ReadRuns does:
// each file's repetitions are numbered after the previous files', so
// that runs pair only with runs of their own file. The runs are copied.
func Combine(files [][]Run) []Run {
	var runs []Run
	offset := 0
	for _, rs := range files {
		next := offset
		for _, r := range rs {
			r.Rep += offset
			next = max(next, r.Rep+1)
			runs = append(runs, r)
		}
		offset = next
	}
	return runs
}

// Table is the table of runs taken together (Combine), as apps --from
// FILE,... prints it: rows of the programs, settings and arms they hold
// (Present), and the failed runs.
func Table(runs []Run) Summary {
	programs, contentions, arms := Present(runs)
	return Summarized(runs, programs, contentions, arms)
}

// Present returns what runs hold: programs in the order they first
// appear, settings and arms in their usual order (settings by their
// number of CPUs, then as corunner.Contentions; arms as ArmOrder, then
// the arms it does not know, such as a script's, by name).
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
	SortSettings(contentions)
	for _, a := range ArmOrder {
		if armSet[a] {
			arms = append(arms, a)
			delete(armSet, a)
		}
	}
	return programs, contentions, append(arms, slices.Sorted(maps.Keys(armSet))...)
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
