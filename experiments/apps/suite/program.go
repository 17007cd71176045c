package suite

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Arms: how a program is run (ArmsHelp says what each does).
//
//	cuda-default       the command as is
//	cuda-blocking      LD_PRELOAD=Blocksync (CU_CTX_SCHED_BLOCKING_SYNC on the primary context)
//	hybridsync         LD_PRELOAD=Lib (libhybridsync.so in its default mode)
//	hybridsync-linked  the command with the program's Linked words: its
//	                   build that links libhybridsync, nothing preloaded
//	cuda-default-again cuda-default once more: the A/A control, whose
//	                   ratio to cuda-default is the method's own noise
//	omp-passive        OMP_WAIT_POLICY=PASSIVE
//	omp-spin1k         GOMP_SPINCOUNT=1000
//	hybridsync-run     the command under Launcher (hybridsync-run CMD...)
//	hybridsync-run-live the same with HYBRIDSYNC_OPENMP=live (OpenMP on libomp)
//
// Arms are the arms run unless asked otherwise; every program has them.
var Arms = []string{"cuda-default", "cuda-blocking", "hybridsync"}

// AllArms are the arms that can be asked for, in the table's order.
var AllArms = slices.Clone(apptable.ArmOrder)

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
	// Linked are the words added to the command in the hybridsync-linked
	// arm, which make the program run its build that links libhybridsync
	// (e.g. "--linked"); only programs that have one can run that arm.
	Linked string `json:"linked,omitempty"`
	// CPUs, when set, is the number of CPUs the program is made for (its
	// threads): it runs only under the contention settings on that many
	// (none and while1 for 1, nonexN and while1xN for N), and is skipped
	// under the others.
	CPUs int `json:"cpus,omitempty"`

	argv   []string // resolved: the command's words, argv[0] a path
	linked []string // Linked's words
}

// Config is one matrix of the suite: programs x contention settings x
// arms x repetitions, on one CPU.
type Config struct {
	Programs   []Program
	Only       []string // run only these programs; all if empty
	Dir        string   // the programs run here; relative paths in commands are resolved here
	Arms       []string
	Contention []string
	Reps       int
	CPU        int    // pinned to; -1: the last one this process may use
	Lib        string // libhybridsync.so, for the hybridsync arm and in-process programs
	Blocksync  string // blocksync.so, for the cuda-blocking arm
	// Launcher is hybridsync-run, for the hybridsync-run arm; "": the one
	// beside Lib's folder (LauncherFor).
	Launcher string
	Seconds  float64
	Timeout  time.Duration // of one run
	// ContendAtStart puts the setting in place before every program
	// starts, whatever its ready line: for what looks at the CPUs when
	// the program starts (hybridsync-run measures their contention).
	ContendAtStart bool
	CapQuota       time.Duration
	CapPeriod      time.Duration
	// Log gets a line per run as it finishes.
	Log io.Writer
	// Agent, when set, runs the agent in-process beside each program
	// (agent.go).
	Agent *Agent

	feed *hintfeed.Feed // the running Agent
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// Check validates the matrix, names the flag at fault, and resolves the
// programs (only those of Only), the CPU and the libraries' paths.
func (c *Config) Check() error {
	if c.Reps <= 0 {
		return errors.New("--reps must be positive")
	}
	if c.Seconds < 0 || c.Timeout <= 0 {
		return errors.New("--seconds must be >= 0 and --timeout positive")
	}
	if c.CapQuota <= 0 || c.CapQuota > c.CapPeriod {
		return errors.New("--cap-quota must be positive and at most --cap-period")
	}
	if len(c.Arms) == 0 || len(c.Contention) == 0 {
		return errors.New("--arms and --contention must not be empty")
	}
	if err := uniqueIn("--arms", "arm", c.Arms, AllArms); err != nil {
		return err
	}
	if err := CheckSettings(c.Contention); err != nil {
		return err
	}
	if st, err := os.Stat(c.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--dir %s: not a directory", c.Dir)
	}
	cpus, err := corunner.Online()
	if err != nil {
		return err
	}
	if c.CPU < 0 {
		c.CPU = cpus[len(cpus)-1]
	} else if !slices.Contains(cpus, c.CPU) {
		return fmt.Errorf("--cpu %d: not one this process may use (%v)", c.CPU, cpus)
	}
	for _, name := range c.Contention {
		if _, err := c.cpusFor(settingOf(name).CPUs); err != nil {
			return fmt.Errorf("--contention %s: %w", name, err)
		}
	}
	if len(c.Programs) == 0 {
		return errors.New("no programs: give --suite or --program")
	}
	if len(c.Only) > 0 {
		if err := uniqueIn("--only", "program", c.Only, c.Names()); err != nil {
			return err
		}
		c.Programs = slices.DeleteFunc(c.Programs, func(p Program) bool { return !slices.Contains(c.Only, p.Name) })
	}
	seen := map[string]bool{}
	for i := range c.Programs {
		p := &c.Programs[i]
		if !nameRE.MatchString(p.Name) {
			return fmt.Errorf("program name %q: want letters, digits, '_', '.', '-'", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("program %q given twice", p.Name)
		}
		seen[p.Name] = true
		if err := p.resolve(c.Dir); err != nil {
			return fmt.Errorf("program %s: %w", p.Name, err)
		}
		if p.InProcess && !slices.Contains(c.Arms, "hybridsync") {
			return fmt.Errorf("program %s compares the arms in one process under --lib: --arms must include hybridsync", p.Name)
		}
		if slices.Contains(c.Arms, "hybridsync-linked") && (p.Linked == "" || p.InProcess) {
			return fmt.Errorf("program %s has no build that links libhybridsync (\"linked\" in the suite): drop hybridsync-linked from --arms or --only it out", p.Name)
		}
		if p.CPUs < 0 || p.CPUs > MaxSettingCPUs {
			return fmt.Errorf("program %s: \"cpus\" %d: want 1 to %d", p.Name, p.CPUs, MaxSettingCPUs)
		}
		if err := p.checkArms(c.Arms); err != nil {
			return err
		}
	}
	if err := c.checkPrograms(); err != nil {
		return err
	}
	if err := c.Agent.check(c.Programs); err != nil {
		return err
	}
	if err := c.checkShims(); err != nil {
		return err
	}
	return c.checkLauncher()
}

// Names are the programs' names, in order.
func (c *Config) Names() []string {
	names := make([]string, len(c.Programs))
	for i, p := range c.Programs {
		names[i] = p.Name
	}
	return names
}

// checkShims checks the libraries the arms preload: --lib for the
// hybridsync arm, --blocksync for cuda-blocking unless every program
// compares the arms inside one process (which switches the mode itself).
func (c *Config) checkShims() error {
	separate := slices.ContainsFunc(c.Programs, func(p Program) bool { return !p.InProcess })
	for _, need := range []struct {
		arm, flag string
		path      *string
	}{{"cuda-blocking", "--blocksync", &c.Blocksync}, {"hybridsync", "--lib", &c.Lib}} {
		if !slices.Contains(c.Arms, need.arm) || (need.arm == "cuda-blocking" && !separate) {
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
	if p.linked, err = SplitWords(p.Linked); err != nil {
		return fmt.Errorf("linked: %w", err)
	}
	return nil
}

// args returns the program's command line for a run in an arm.
func (p *Program) args(arm string, seconds float64) []string {
	a := append([]string(nil), p.argv...)
	if arm == "hybridsync-linked" {
		a = append(a, p.linked...)
	}
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
		if !slices.Contains(valid, v) {
			return fmt.Errorf("%s: unknown %s %q (want %s)", flag, what, v, strings.Join(valid, ", "))
		}
		if seen[v] {
			return fmt.Errorf("%s: %q given twice", flag, v)
		}
		seen[v] = true
	}
	return nil
}
