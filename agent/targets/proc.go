package targets

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/cgroups"
	"github.com/vgpu-probe/vgpu-probe/proctree"
)

// ErrNoProcess is wrapped when a pid given to NewPID does not exist.
var ErrNoProcess = errors.New("no such process")

// A thread's vCPU index comes from where the hypervisor put it, never
// from its name: any thread may call itself "CPU 7/KVM" (prctl
// PR_SET_NAME), and a tenant's process that named 500 threads so would
// add 500 vcpu label values. libvirt puts each vCPU thread of a domain in
// a cgroup of its own, vcpuN, under the domain's machine scope
// (/machine.slice/machine-qemu\x2d1\x2dvm.scope/libvirt/vcpu0 on v2,
// .../vm.scope/vcpu0 on v1, /machine/vm.libvirt-qemu/vcpu0 without
// systemd), which only root and libvirt can make. Threads elsewhere are
// not vCPUs (-1).

// PID watches every thread of one process (with NewProcessTree, of the
// processes descended from it too), re-scanning /proc for threads that
// start or end.
type PID struct {
	pid      int
	procRoot string
	every    time.Duration
	tree     bool
}

var _ Source = (*PID)(nil)

// NewPID checks that pid exists. every is the re-scan period.
func NewPID(pid int, every time.Duration) (*PID, error) {
	return newPID("/proc", pid, every)
}

// NewProcessTree is NewPID for pid and every process descended from it
// (found in /proc by proctree), those started later included (found at
// the next re-scan): a program run through a wrapper (a script that
// starts the engine) is the whole tree. The target ends when pid does.
func NewProcessTree(pid int, every time.Duration) (*PID, error) {
	p, err := newPID("/proc", pid, every)
	if err != nil {
		return nil, err
	}
	p.tree = true
	return p, nil
}

func newPID(procRoot string, pid int, every time.Duration) (*PID, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	p := &PID{pid: pid, procRoot: procRoot, every: every}
	if _, err := p.scan(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *PID) scan() (Target, error) {
	threads, err := processThreads(p.procRoot, p.pid)
	if err != nil {
		return Target{}, err
	}
	if p.tree {
		for _, d := range proctree.Descendants(p.pid) {
			more, _ := processThreads(p.procRoot, d) // gone since the listing: left out
			threads = append(threads, more...)
		}
		slices.SortFunc(threads, func(a, b Thread) int { return a.TID - b.TID })
	}
	return Target{Kind: KindPID, Name: strconv.Itoa(p.pid), Threads: threads}, nil
}

// Run implements Source.
func (p *PID) Run(ctx context.Context) <-chan Event {
	return poll(ctx, p.every, p.scan)
}

// processThreads lists /proc/<pid>/task with each thread's vCPU index.
func processThreads(procRoot string, pid int) ([]Thread, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("listing threads of pid %d: %w", pid, err)
	}
	var out []Thread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		out = append(out, Thread{TID: tid, VCPU: vcpuOf(filepath.Join(dir, e.Name(), "cgroup"))})
	}
	slices.SortFunc(out, func(a, b Thread) int { return a.TID - b.TID })
	return out, nil
}

// vcpuOf reads a thread's cgroups and returns the N of a libvirt vcpuN
// cgroup under the machine slice, else -1.
func vcpuOf(cgroupPath string) int {
	b, err := os.ReadFile(cgroupPath)
	if err != nil {
		return -1 // thread ended between listing and reading
	}
	for _, m := range cgroups.Parse(b) {
		if n := libvirtVCPU(m.Path); n >= 0 {
			return n
		}
	}
	return -1
}

// libvirtVCPU is N when path is libvirt's vcpuN cgroup of a domain
// (under /machine.slice or /machine), else -1.
func libvirtVCPU(path string) int {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 3 || (parts[0] != "machine.slice" && parts[0] != "machine") {
		return -1
	}
	m := vcpuDir.FindStringSubmatch(parts[len(parts)-1])
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return n
}

// poll runs scan every period and sends Added when the description
// changes and Removed (then stops) once scan fails because the target is
// gone. Other scan errors keep the last description: a transient read
// error must not drop a VM.
func poll(ctx context.Context, every time.Duration, scan func() (Target, error)) <-chan Event {
	ch := make(chan Event, 1)
	go func() {
		defer close(ch)
		var last Target
		have := false
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			cur, err := scan()
			switch {
			case errors.Is(err, ErrNoProcess) || errors.Is(err, ErrNoCgroup):
				if have {
					select {
					case ch <- Event{Kind: Removed, Target: last}:
					case <-ctx.Done():
					}
				}
				return
			case err == nil && (!have || !cur.Equal(last)):
				select {
				case ch <- Event{Kind: Added, Target: cur}:
				case <-ctx.Done():
					return
				}
				last, have = cur, true
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// Scan describes the process now (what Run sends on change).
func (p *PID) Scan() (Target, error) { return p.scan() }
