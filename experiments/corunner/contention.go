package corunner

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// Contentions are the CPU contention settings that bench and apps measure
// under, on the one CPU the program runs on:
//
//	none        the program alone
//	while1      a busy-loop co-runner pinned to the same CPU
//	cap         the program in a cgroup with a CPU bandwidth limit
//	cap+while1  both: capped program, uncapped co-runner outside its cgroup
var Contentions = []string{"none", "while1", "cap", "cap+while1"}

// ValidContention reports whether name is one of Contentions.
func ValidContention(name string) bool {
	for _, c := range Contentions {
		if c == name {
			return true
		}
	}
	return false
}

// Setting is a contention setting in place: the cgroup the program must be
// put in (nil without a cap) and the co-runner (nil without one).
type Setting struct {
	Group *cpucap.Group
	co    *Process
}

// Capped reports whether the setting name limits the program's CPU
// bandwidth (the cap settings).
func Capped(name string) bool { return strings.HasPrefix(name, "cap") }

// Setup puts the contention setting name in place on cpu: for the cap
// settings a cgroup called cgName limited to quota per period, for the
// while1 settings a busy loop pinned to cpu. Close undoes it.
func Setup(name string, cpu int, cgName string, quota, period time.Duration) (*Setting, error) {
	return SetupOn(name, []int{cpu}, cgName, quota, period)
}

// SetupOn is Setup on several CPUs, as a VM of len(cpus) vCPUs has them:
// the while1 settings pin a busy loop on each of cpus (one co-runner
// process, a thread per CPU), the cap settings allow quota per period
// for each of them (len(cpus) x quota).
func SetupOn(name string, cpus []int, cgName string, quota, period time.Duration) (*Setting, error) {
	if !ValidContention(name) {
		return nil, fmt.Errorf("unknown contention setting %q (want %s)", name, strings.Join(Contentions, ", "))
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("%s: no CPU to put it on", name)
	}
	s := &Setting{}
	if Capped(name) {
		g, err := cpucap.Create(cgName, time.Duration(len(cpus))*quota, period)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (the cap settings need root)", name, err)
		}
		s.Group = g
	}
	if strings.HasSuffix(name, "while1") {
		p, err := Start("while1", cpus)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.co = p
	}
	return s, nil
}

// Close stops the co-runner and removes the cgroup; safe to call twice.
func (s *Setting) Close() error {
	if s.co != nil {
		s.co.Stop()
	}
	if s.Group != nil {
		return s.Group.Remove()
	}
	return nil
}

// Pause stops the setting's busy loops (SIGSTOP) or lets them run again
// (SIGCONT), for a neighbour that comes and goes; nothing without one.
func (s *Setting) Pause(stopped bool) error {
	if s.co == nil {
		return nil
	}
	sig := syscall.SIGCONT
	if stopped {
		sig = syscall.SIGSTOP
	}
	return s.co.cmd.Process.Signal(sig)
}

// CoRunnerPID is the busy loops' process, 0 where the setting has none.
func (s *Setting) CoRunnerPID() int {
	if s.co == nil {
		return 0
	}
	return s.co.cmd.Process.Pid
}

// CPU returns how much CPU time the setting's busy-loop co-runner has had
// so far (all its threads, from the kernel's per-thread accounting), and
// false where the setting has no co-runner. Its growth over a cell is the
// co-runner's throughput: what a mitigation that favours the program
// takes from the other tenant.
func (s *Setting) CPU() (time.Duration, bool) {
	if s.co == nil {
		return 0, false
	}
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", s.co.Pid()))
	var sum int64
	for _, p := range paths {
		if st, err := signal.ReadSchedstat(p); err == nil { // else a thread that went
			sum += st.Run
		}
	}
	return time.Duration(sum), len(paths) > 0
}
