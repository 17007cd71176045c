package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/proctree"
	"golang.org/x/sys/unix"
)

func init() { reexec.Register("apps-exec", execMain) }

// envSpec carries a run's spec to the exec stub; the stub drops it.
const envSpec = "VGPU_PROBE_APPS_SPEC"

// spec is what the exec stub needs: the CPUs to pin to, the program,
// the environment the program gets on top of the stub's own (replacing
// a variable of the same name) and the variables it goes without.
// LD_PRELOAD goes here, not into the stub's environment, so that the
// shim is loaded into the program and never into the (Go) stub.
type spec struct {
	CPUs  []int    `json:"cpus"`
	Argv  []string `json:"argv"`
	Env   []string `json:"env"`
	Unset []string `json:"unset,omitempty"`
}

// execMain runs in the stub: pin this thread (the one that execs, whose
// affinity the program inherits) to the CPUs, wait until the parent has
// put us in the program's cgroup (stdin closes), then exec the program.
func execMain() int {
	var s spec
	if err := json.Unmarshal([]byte(os.Getenv(envSpec)), &s); err != nil || len(s.Argv) == 0 || len(s.CPUs) == 0 {
		fmt.Fprintln(os.Stderr, "apps exec: bad spec:", err)
		return 2
	}
	runtime.LockOSThread()
	var set unix.CPUSet
	for _, c := range s.CPUs {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintf(os.Stderr, "apps exec: pin to CPUs %v: %v\n", s.CPUs, err)
		return 1
	}
	var buf [1]byte
	for {
		if _, err := os.Stdin.Read(buf[:]); err != nil {
			break
		}
	}
	drop := map[string]bool{envSpec: true, "VGPU_PROBE_REEXEC": true}
	for _, v := range s.Unset {
		drop[v] = true
	}
	for _, kv := range s.Env {
		name, _, _ := strings.Cut(kv, "=")
		drop[name] = true
	}
	env := make([]string, 0, len(os.Environ())+len(s.Env))
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !drop[name] {
			env = append(env, kv)
		}
	}
	env = append(env, s.Env...)
	reportStart()
	err := syscall.Exec(s.Argv[0], s.Argv, env)
	fmt.Fprintf(os.Stderr, "apps exec: %s: %v\n", s.Argv[0], err)
	return 127
}

// startFD is the stub's descriptor for reportStart: the parent's
// cmd.ExtraFiles[0].
const startFD = 3

// reportStart tells the parent when the program starts, just before the
// exec: the monotonic clock, and the stub's own CPU time so far, which the
// program's rusage will include. A program that prints no result line is
// timed from there.
func reportStart() {
	f := os.NewFile(startFD, "start")
	var ru syscall.Rusage
	var ts unix.Timespec
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil && unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
		fmt.Fprintf(f, "%d %d\n", ts.Nano(), syscall.TimevalToNsec(ru.Utime)+syscall.TimevalToNsec(ru.Stime))
	}
	f.Close()
}

// started reads what reportStart wrote: when the program started (the
// monotonic clock, ns) and the CPU time its process had used by then.
func started(r io.Reader) (monoNs int64, stubCPU time.Duration, ok bool) {
	var cpu int64
	if n, _ := fmt.Fscan(r, &monoNs, &cpu); n != 2 || monoNs <= 0 || cpu < 0 {
		return 0, 0, false
	}
	return monoNs, time.Duration(cpu), true
}

// Rotate returns s starting at position k, wrapping around.
func Rotate[T any](s []T, k int) []T {
	n := len(s)
	out := make([]T, n)
	for i := range s {
		out[i] = s[(i+k)%n]
	}
	return out
}

// inProcessEpoch is how long a program that compares the arms in one
// process runs each arm per round (--epoch-s). Under a cap each epoch
// spans whole cap periods instead: one of 15.5 periods would hold 15 or
// 16 refills of the quota by its phase, 7% apart, noise that every
// round's ratios would carry.
const inProcessEpoch = 300 * time.Millisecond

// epochFor is the epoch of an in-process program under contention.
func (c *Config) epochFor(contention string) time.Duration {
	if !corunner.Capped(contention) {
		return inProcessEpoch
	}
	return max(1, (inProcessEpoch+c.CapPeriod/2)/c.CapPeriod) * c.CapPeriod
}

// processes is how many processes of the program one cell of arms runs.
func (p Program) processes(arms int) int {
	if p.InProcess {
		return 1
	}
	return arms
}

// statsFile is where the hybridsync stats of one cell's run in an arm go.
func statsFile(out string, p Program, arm, contention string, rep int) string {
	name := p.Name
	switch arm {
	case "hybridsync-linked":
		name += "-linked"
	case "hybridsync-run":
		name += "-run"
	case "hybridsync-run-live":
		name += "-run-live"
	}
	f, _ := filepath.Abs(filepath.Join(out, "stats", fmt.Sprintf("%s-%s-%d.json", name, contention, rep+1)))
	return f
}

// runInProcess runs a program that compares the arms itself
// (Program.InProcess) once, under the hybridsync arm's environment, and
// returns a run per arm and round of its result (only the arms asked
// for); one failed hybridsync run if it failed.
func (c *Config) runInProcess(ctx context.Context, p Program, contention string, rep int, out string, done, total int) ([]Run, error) {
	stats := statsFile(out, p, "hybridsync", contention, rep)
	proc := Run{Program: p.Name, Arm: "hybridsync", Contention: contention, Rep: rep, Start: time.Now().UTC().Format(time.RFC3339Nano)}
	rounds, err := c.runOne(ctx, p, "hybridsync", stats, contention, &proc)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(stats); err != nil {
		stats = ""
	}
	seen := map[int]bool{}
	for _, rd := range rounds {
		seen[rd.Round] = true
	}
	line := fmt.Sprintf("%d rounds  wall %.3f s  cpu %.3f s", len(seen), proc.WallS, proc.CPUS)
	if proc.OK() && len(rounds) == 0 {
		proc.Error = "no \"rounds\" in its result line: not a program that compares the arms in one process"
	}
	if !proc.OK() {
		line = "FAILED: " + proc.Error
	}
	fmt.Fprintf(c.Log, "[%d/%d] rep %d %-14s %-10s %-18s %s\n", done+1, total, rep+1, p.Name, contention, "in-process", line)
	if !proc.OK() {
		return []Run{proc}, nil
	}
	var runs []Run
	order := map[int]int{}
	for _, rd := range rounds {
		if !slices.Contains(c.Arms, rd.Arm) {
			continue
		}
		r := proc
		r.Arm, r.Round, r.Order = rd.Arm, rd.Round+1, order[rd.Round]
		r.Steps, r.WallS, r.CPUS, r.RusageCPUS, r.Stats = rd.Steps, rd.WallS, rd.CPUS, 0, ""
		r.SliceNs, r.CPUBusyS = rd.SliceNs, rd.CPUBusyS
		if rd.Arm == "hybridsync" {
			r.Stats = stats
		}
		order[rd.Round]++
		runs = append(runs, r)
	}
	return runs, nil
}

// RunCell runs the program in each arm in the order given, under one
// contention setting.
func (c *Config) RunCell(ctx context.Context, p Program, contention string, rep int, arms []string, out string, done, total int) ([]Run, error) {
	var runs []Run
	for i, arm := range arms {
		stats := ""
		if loadsLib(arm) {
			stats = statsFile(out, p, arm, contention, rep)
		}
		r := Run{Program: p.Name, Arm: arm, Contention: contention, Rep: rep, Order: i, Start: time.Now().UTC().Format(time.RFC3339Nano)}
		if _, err := c.runOne(ctx, p, arm, stats, contention, &r); err != nil {
			return runs, err
		}
		if stats != "" {
			if _, err := os.Stat(stats); err == nil {
				r.Stats = stats
			}
		}
		runs = append(runs, r)
		line := fmt.Sprintf("wall %.3f s  cpu %.3f s  steps %d", r.WallS, r.CPUS, r.Steps)
		if r.Timed {
			line = fmt.Sprintf("wall %.3f s  cpu %.3f s  (no result line: the whole process tree)", r.WallS, r.CPUS)
		}
		if !r.OK() {
			line = "FAILED: " + r.Error
		}
		fmt.Fprintf(c.Log, "[%d/%d] rep %d %-14s %-10s %-18s %s\n", done+len(runs), total, rep+1, p.Name, contention, arm, line)
	}
	return runs, nil
}

// contend puts a contention setting in place for the program pid on
// its CPUs: the co-runner (a busy loop pinned on each), and the cgroup
// it is moved into with what it has started (by its ready line, a
// wrapper may already run its engine). The caller closes it.
func (c *Config) contend(contention string, cpus []int, pid int) (*corunner.Setting, error) {
	s, err := corunner.SetupOn(settingOf(contention).Base, cpus, fmt.Sprintf("vgpu-probe-apps-%d", os.Getpid()), c.CapQuota, c.CapPeriod)
	if err != nil {
		return nil, err
	}
	if g := s.Group; g != nil {
		if err := g.AddTree(pid); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// atReady says whether the setting goes in place at program p's ready
// line rather than before it starts: as its pattern says, else at the
// ready line of a program that has one unless atStart (--contend-at-start).
func (s setting) atReady(p Program, atStart bool) (bool, error) {
	switch s.Pattern {
	case "":
		return p.Ready != "" && !atStart, nil
	case "late":
		if p.Ready == "" {
			return false, fmt.Errorf("setting %s: program %s writes no ready line for its busy loops to start at", s.Name, p.Name)
		}
		return true, nil
	}
	return false, nil
}

// comeAndGo stops the setting's busy loops for d, lets them run for d,
// and so on, until exited is closed (the setting is then closed, which
// ends them stopped or not).
func comeAndGo(s *corunner.Setting, d time.Duration, exited <-chan struct{}) {
	t := time.NewTicker(d)
	defer t.Stop()
	for stopped := true; ; stopped = !stopped {
		select {
		case <-exited:
			return
		case <-t.C:
		}
		s.Pause(stopped)
	}
}

// readyWriter passes what the program writes on to w and closes ready
// (once) when a whole line equal to marker goes by.
type readyWriter struct {
	w      io.Writer
	marker string
	line   []byte
	ready  chan struct{}
	seen   bool
}

func (r *readyWriter) Write(p []byte) (int, error) {
	if !r.seen {
		for _, c := range p {
			if c != '\n' {
				if len(r.line) <= len(r.marker) {
					r.line = append(r.line, c)
				}
				continue
			}
			if strings.TrimSpace(string(r.line)) == r.marker {
				r.seen = true
				close(r.ready)
				break
			}
			r.line = r.line[:0]
		}
	}
	return r.w.Write(p)
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	b   []byte
	max int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// runOne runs the program once and fills r, and returns the rounds of its
// result line, if any. A failure of the program is recorded in r; the
// error returned is for the run's machinery (and Ctrl-C), which ends the
// whole matrix.
func (c *Config) runOne(ctx context.Context, p Program, arm, stats, contention string, r *Run) ([]Round, error) {
	r.Agent, r.ContendAtStart = c.Agent.String(), c.ContendAtStart && p.Ready != ""
	var rounds []Round
	err := c.underAgent(func() error {
		var err error
		rounds, err = c.runProcess(ctx, p, arm, stats, contention, r)
		return err
	})
	return rounds, err
}

// runProcess is runOne's run of the program's process.
func (c *Config) runProcess(ctx context.Context, p Program, arm, stats, contention string, r *Run) ([]Round, error) {
	argv := c.armArgs(&p, arm)
	if p.InProcess {
		argv = append(argv, "--epoch-s", strconv.FormatFloat(c.epochFor(contention).Seconds(), 'f', -1, 64))
	}
	env := append(c.armEnv(arm, stats), c.agentEnv(p)...)
	if p.InProcess {
		// The program runs the arms asked for, and only those.
		env = append(env, "APPS_INPROC_ARMS="+strings.Join(c.Arms, ","))
	}
	cpus, err := c.cpusFor(settingOf(contention).CPUs)
	if err != nil {
		return nil, err
	}
	if len(cpus) > 1 {
		r.OnCPUs = cpus
	}
	sp, err := json.Marshal(spec{CPUs: cpus, Argv: argv, Env: env, Unset: armUnset(arm)})
	if err != nil {
		return nil, err
	}
	cmd, err := reexec.Command("apps-exec")
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, envSpec+"="+string(sp))
	cmd.Dir = c.Dir
	stdout := &tailWriter{max: 1 << 20}
	stderr := &tailWriter{max: 4096}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	ready := make(chan struct{})
	st := settingOf(contention)
	waitReady, err := st.atReady(p, c.ContendAtStart)
	if err != nil {
		return nil, err
	}
	if waitReady {
		cmd.Stderr = &readyWriter{w: stderr, marker: p.Ready, ready: ready}
	} else {
		close(ready)
	}
	// A child the program leaves behind holding its stdout must not hang us.
	cmd.WaitDelay = 2 * time.Second
	start, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	startR, startW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer startR.Close()
	defer startW.Close()
	cmd.ExtraFiles = []*os.File{startW} // startFD
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	startW.Close()
	kill := func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	unwatch, err := c.watch(p, cmd.Process.Pid, contention)
	if err != nil {
		kill()
		cmd.Wait()
		return nil, err
	}
	defer unwatch()
	var timedOut atomic.Bool
	timer := time.AfterFunc(c.Timeout, func() { timedOut.Store(true); kill() })
	defer timer.Stop()
	stop := context.AfterFunc(ctx, kill)
	defer stop()
	// The setting goes in place when the program is ready (at once
	// without a marker); its failure ends the matrix, as Ctrl-C does.
	var setting *corunner.Setting
	var setupErr error
	applied := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(applied)
		select {
		case <-ready:
		case <-exited:
			return
		}
		if setting, setupErr = c.contend(contention, cpus, cmd.Process.Pid); setupErr != nil {
			kill()
			return
		}
		if d := st.period(); d > 0 {
			go comeAndGo(setting, d, exited)
		}
	}()
	if !waitReady {
		<-applied
		if setupErr != nil {
			cmd.Wait()
			return nil, setupErr
		}
	}
	start.Close() // the stub's signal to exec the program
	werr := cmd.Wait()
	var end unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &end)
	timer.Stop()
	// What the program left running in its process group, read before it
	// is killed: its rusage above covers only the children it reaped.
	var leftCPU time.Duration
	for _, pid := range proctree.Group(cmd.Process.Pid) {
		c, _ := proctree.CPU(pid)
		leftCPU += c
	}
	// The program's own children (e.g. compiler workers) must not outlive it.
	kill()
	close(exited)
	<-applied
	if setting != nil {
		setting.Close()
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if setupErr != nil {
		return nil, setupErr
	}
	if waitReady && setting == nil && werr == nil {
		r.Error = fmt.Sprintf("never wrote its ready line %q to stderr", p.Ready)
		return nil, nil
	}
	if u, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.RusageCPUS = float64(syscall.TimevalToNsec(u.Utime)+syscall.TimevalToNsec(u.Stime)) / 1e9
	}
	r.ExitStatus = cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	switch {
	case timedOut.Load():
		r.Error = fmt.Sprintf("timed out after %v", c.Timeout)
	case werr != nil && !errors.As(werr, &ee):
		r.Error = werr.Error()
	case werr != nil:
		r.Error = fmt.Sprintf("%v%s", werr, lastLine(stderr.b))
	case !hasResultLine(stdout.b):
		// A program that reports nothing is timed as a whole: exec to
		// exit, and the CPU time of its process tree.
		mono, stubCPU, ok := started(startR)
		if !ok {
			r.Error = "no start time from the exec stub"
			return nil, nil
		}
		r.Timed = true
		r.WallS = float64(end.Nano()-mono) / 1e9
		r.CPUS = max(0, r.RusageCPUS-stubCPU.Seconds()+leftCPU.Seconds())
	default:
		rounds, err := parseResult(stdout.b, r)
		if err != nil {
			r.Error = err.Error() + lastLine(stderr.b)
		}
		return rounds, nil
	}
	return nil, nil
}

// hasResultLine reports whether the program's stdout ends in a line that
// is meant as its result: one that starts with "{". A program whose last
// line is anything else, or that prints nothing, is timed from outside.
func hasResultLine(out []byte) bool {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.HasPrefix(strings.TrimSpace(lines[len(lines)-1]), "{")
}

// lastLine returns ": " and the last non-empty line of b, or "".
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return ": " + l
	}
	return ""
}

// Round is one arm's epoch of a program that compares the arms inside
// one process (Program.InProcess).
type Round struct {
	Round int     `json:"round"`
	Arm   string  `json:"arm"`
	Steps int     `json:"steps"`
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
	// SliceNs is the program's main thread's EEVDF slice in the arm (0:
	// not reported).
	SliceNs uint64 `json:"slice_ns,omitempty"`
	// CPUBusyS is how long the program's one CPU was busy in the round,
	// its own CPU time included (absent where it was not pinned).
	CPUBusyS *float64 `json:"cpu_busy_s,omitempty"`
}

// parseResult reads the program's JSON line, the last non-empty line of
// its stdout, into r, and returns its rounds if it has any.
func parseResult(out []byte, r *Run) ([]Round, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	var res struct {
		Steps  *int     `json:"steps"`
		WallS  *float64 `json:"wall_s"`
		CPUS   *float64 `json:"cpu_s"`
		HostS  *float64 `json:"host_s"`
		Rounds []Round  `json:"rounds"`
	}
	if err := json.Unmarshal([]byte(last), &res); err != nil {
		return nil, fmt.Errorf("result line %q: %v", truncate(last, 80), err)
	}
	if res.WallS == nil || res.CPUS == nil || *res.WallS <= 0 || *res.CPUS < 0 {
		return nil, fmt.Errorf("result line %q: want wall_s > 0 and cpu_s >= 0", truncate(last, 80))
	}
	for _, rd := range res.Rounds {
		if !slices.Contains(AllArms, rd.Arm) || rd.Round < 0 || rd.Steps <= 0 || rd.WallS <= 0 || rd.CPUS < 0 {
			return nil, fmt.Errorf("result line: round %+v: want an arm of %s, round >= 0, steps and wall_s > 0, cpu_s >= 0",
				rd, strings.Join(AllArms, ", "))
		}
	}
	if res.HostS != nil && (*res.HostS < 0 || *res.HostS > *res.WallS) {
		return nil, fmt.Errorf("result line %q: want 0 <= host_s <= wall_s", truncate(last, 80))
	}
	r.WallS, r.CPUS, r.HostS = *res.WallS, *res.CPUS, res.HostS
	if res.Steps != nil {
		r.Steps = *res.Steps
	}
	return res.Rounds, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
