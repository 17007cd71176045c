// Package corunner starts the CPU co-runners of the experiments: the
// tenants that share CPUs with the GPU program. Each runs in its own child
// process, pinned to the CPUs it is given, until stopped.
package corunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
)

// Kinds of built-in co-runners:
//
//	while1  a busy loop: the paper's synthetic worst case
//	matmul  dense matrix multiply: compute-bound with a cache-sized working set
//	stream  STREAM triad over arrays larger than the last-level cache: memory bandwidth
var Kinds = []string{"while1", "matmul", "stream"}

// Valid reports whether kind is a built-in co-runner.
func Valid(kind string) bool {
	for _, k := range Kinds {
		if k == kind {
			return true
		}
	}
	return false
}

func init() { reexec.Register("corunner", childMain) }

// Process is a running co-runner.
type Process struct {
	cmd  *exec.Cmd
	once sync.Once
	err  error
}

// Start runs a co-runner of kind with one thread pinned to each CPU in
// cpus (at least one).
func Start(kind string, cpus []int) (*Process, error) {
	if !Valid(kind) {
		return nil, fmt.Errorf("unknown co-runner %q (want one of %v)", kind, Kinds)
	}
	if len(cpus) == 0 {
		return nil, errors.New("co-runner needs at least one CPU")
	}
	args := []string{kind}
	for _, c := range cpus {
		args = append(args, strconv.Itoa(c))
	}
	cmd, err := reexec.Command("corunner", args...)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s co-runner: %w", kind, err)
	}
	return &Process{cmd: cmd}, nil
}

// Pid returns the co-runner's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop kills the co-runner and waits for it; safe to call more than once.
func (p *Process) Stop() error {
	p.once.Do(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.cmd.Wait()
	})
	return p.err
}

// StopAll stops every process in ps, for deferred cleanup.
func StopAll(ps []*Process) {
	for _, p := range ps {
		p.Stop()
	}
}

// childMain runs in the co-runner process: os.Args[1] is the kind, the rest
// are CPUs.
func childMain() int {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "corunner: want KIND CPU...")
		return 2
	}
	kind := os.Args[1]
	var wg sync.WaitGroup
	for _, a := range os.Args[2:] {
		cpu, err := strconv.Atoi(a)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corunner: bad cpu %q\n", a)
			return 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if err := Pin(cpu); err != nil {
				fmt.Fprintln(os.Stderr, "corunner:", err)
				os.Exit(1)
			}
			loops[kind](context.Background())
		}()
	}
	wg.Wait()
	return 0
}

// Pin binds the calling OS thread to cpu. Callers lock the goroutine to its
// thread first.
func Pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin thread to cpu %d: %w", cpu, err)
	}
	return nil
}

// ParseCPUs parses a CPU list like "0-3,6".
func ParseCPUs(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= 1<<16 {
			return nil, fmt.Errorf("cpu list %q: want numbers and ranges like 0-3,6", s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// Online returns the CPUs this process may run on.
func Online() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read cpu affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
