// Package local is the experiment backend that emulates VMs on this
// machine with processes: a VM's vCPUs are threads, vCPU i pinned to the
// i-th CPU of the set the VMs share (what libvirt's vcpupin does to a
// real VM's vCPU threads), and a VM's CPU bandwidth quota is a cgroup of
// its own (cgroup v1 cpu controller or v2 cpu.max, as libvirt's
// <cputune> period/quota is). Pinning is by thread affinity rather than
// cpuset cgroups: that is exactly vcpupin's mechanism, it works without
// root, and it keeps the two hierarchies' cpuset quirks (v1 needs
// cpuset.mems, v2 needs +cpuset delegated) out of the measurement.
//
// Every process it starts is a child of this one in a process group of
// its own, killed with it (PR_SET_PDEATHSIG) and by Destroy; every cgroup
// it makes is named vgpu-probe-run-PID-VM and removed by Destroy.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// Backend is the local backend. Its zero value is ready to use.
type Backend struct {
	// Inherit, when set, runs each runner process (start runs it to its
	// end) from a thread with a short EEVDF slice, so that the process
	// and every vCPU thread it makes have it from the start
	// (hintfeed.Feed.Inherit: run --mitigate); nil runs it plainly.
	Inherit func(start func() error) error
}

var _ backend.Backend = Backend{}

// Name returns "local".
func (Backend) Name() string { return "local" }

// CgroupPrefix is the name prefix of every cgroup this process makes.
func CgroupPrefix() string { return fmt.Sprintf("vgpu-probe-run-%d-", os.Getpid()) }

// CanIsolate reports whether this process can create CPU bandwidth
// cgroups, and if not, why.
func CanIsolate() error {
	if _, err := cpucap.Detect(); err != nil {
		return fmt.Errorf("%w: %v", backend.ErrNoIsolation, err)
	}
	if err := unix.Access(cgroupParent(), unix.W_OK); err != nil {
		return fmt.Errorf("%w: cannot create cgroups in %s (needs root): %v", backend.ErrNoIsolation, cgroupParent(), err)
	}
	return nil
}

func cgroupParent() string {
	if v, _ := cpucap.Detect(); v == cpucap.V1 {
		return filepath.Join(cpucap.Root, "cpu")
	}
	return cpucap.Root
}

// env is a created topology.
type env struct {
	topo      backend.Topology
	inherit   func(start func() error) error // Backend.Inherit
	groups    map[string]*cpucap.Group       // by VM name; only VMs with a quota
	corunners []*vmProc
	builtin   []*corunner.Process
	once      sync.Once
	err       error
}

// Create makes t's cgroups, starts the co-runners and places them.
func (b Backend) Create(ctx context.Context, t backend.Topology, co backend.Load) (backend.Env, error) {
	if err := checkTopology(t); err != nil {
		return nil, err
	}
	if co.Cmd == "" && len(t.Corunners) > 0 && !corunner.Valid(co.Kind) {
		return nil, fmt.Errorf("unknown co-runner %q (want one of %v)", co.Kind, corunner.Kinds)
	}
	e := &env{topo: t, groups: map[string]*cpucap.Group{}, inherit: b.Inherit}
	ok := false
	defer func() {
		if !ok {
			e.Destroy()
		}
	}()
	for _, vm := range append([]backend.VM{t.Runner}, t.Corunners...) {
		if vm.QuotaCPUs <= 0 {
			continue
		}
		if err := CanIsolate(); err != nil {
			return nil, err
		}
		sweepOnce.Do(func() { sweepStale() })
		quota := time.Duration(math.Round(float64(t.Period) * vm.QuotaCPUs))
		g, err := cpucap.Create(CgroupPrefix()+vm.Name, quota, t.Period)
		if err != nil {
			return nil, fmt.Errorf("%w: VM %s: %v", backend.ErrNoIsolation, vm.Name, err)
		}
		e.groups[vm.Name] = g
	}
	for _, vm := range t.Corunners {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := e.startCorunner(vm, co); err != nil {
			return nil, err
		}
	}
	ok = true
	return e, nil
}

func checkTopology(t backend.Topology) error {
	online, err := corunner.Online()
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, vm := range append([]backend.VM{t.Runner}, t.Corunners...) {
		if vm.Name == "" || strings.ContainsAny(vm.Name, "/\x00 ") || names[vm.Name] {
			return fmt.Errorf("VM name %q: want a unique plain name", vm.Name)
		}
		names[vm.Name] = true
		if len(vm.CPUs) == 0 {
			return fmt.Errorf("VM %s has no vCPUs", vm.Name)
		}
		for _, c := range vm.CPUs {
			if !slices.Contains(online, c) {
				return fmt.Errorf("VM %s: cpu %d is not one this process may use (%v)", vm.Name, c, online)
			}
		}
		if vm.QuotaCPUs < 0 || (vm.QuotaCPUs > 0 && (t.Period < time.Millisecond || t.Period > time.Second)) {
			return fmt.Errorf("VM %s: quota %.2f CPUs per %v: want a period of 1ms..1s", vm.Name, vm.QuotaCPUs, t.Period)
		}
	}
	return nil
}

func (e *env) startCorunner(vm backend.VM, co backend.Load) error {
	g := e.groups[vm.Name]
	if co.Cmd == "" {
		p, err := corunner.Start(co.Kind, vm.CPUs)
		if err != nil {
			return err
		}
		e.builtin = append(e.builtin, p)
		if g != nil {
			if err := g.Add(p.Pid()); err != nil {
				return err
			}
		}
		return nil
	}
	p, err := startVM(spec{CPUs: vm.CPUs, Cmd: co.Cmd, Restart: true}, io.Discard)
	if err != nil {
		return err
	}
	e.corunners = append(e.corunners, p)
	p.hold.Close() // a co-runner is never held
	if err := p.waitReady(); err != nil {
		return err
	}
	if g != nil {
		if err := g.Add(p.cmd.Process.Pid); err != nil {
			return err
		}
	}
	return p.start.Close()
}

// Corunners returns the co-runners' process ids.
func (e *env) Corunners() []int {
	var pids []int
	for _, p := range e.builtin {
		pids = append(pids, p.Pid())
	}
	for _, c := range e.corunners {
		pids = append(pids, c.cmd.Process.Pid)
	}
	return pids
}

// Run runs w in the runner VM, through Backend.Inherit when set. The
// whole run is its start: the runner process dies with the thread that
// started it (Pdeathsig), so that thread must outlive it.
func (e *env) Run(ctx context.Context, w backend.Workload, started func(pid int)) (results.Result, error) {
	if e.inherit == nil {
		return e.run(ctx, w, started)
	}
	var r results.Result
	err := e.inherit(func() error {
		var err error
		r, err = e.run(ctx, w, started)
		return err
	})
	return r, err
}

func (e *env) run(ctx context.Context, w backend.Workload, started func(pid int)) (results.Result, error) {
	s := spec{CPUs: e.topo.Runner.CPUs, Cmd: w.Cmd}
	var stdout io.Writer = io.Discard
	if w.Cmd != "" {
		s.Mode = w.Mode.String()
	} else {
		s.Loop = &loopSpec{Config: w.Config, Device: w.Device, Mode: w.Mode}
		s.Hold = w.Hold != nil
		stdout = nil // read through a pipe: the result comes before the exit
	}
	p, err := startVM(s, stdout)
	if err != nil {
		return results.Result{}, err
	}
	if !s.Hold {
		p.hold.Close()
	}
	cmd, pid := p.cmd, p.cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-pid, syscall.SIGKILL) })
	defer stop()
	if err := p.waitReady(); err != nil {
		p.kill()
		if ctx.Err() != nil {
			return results.Result{}, ctx.Err()
		}
		return results.Result{}, err
	}
	if g := e.groups[e.topo.Runner.Name]; g != nil {
		if err := g.Add(pid); err != nil {
			p.kill()
			return results.Result{}, err
		}
	}
	if started != nil {
		started(pid)
	}
	t0 := time.Now()
	p.start.Close() // the child's signal to begin: it is placed
	var out []byte
	if p.stdout != nil {
		out, _ = io.ReadAll(p.stdout) // until the child closes it or exits
	}
	if s.Hold {
		w.Hold()
		p.hold.Close()
	}
	err = cmd.Wait()
	wall := time.Since(t0)
	// A command may leave children behind in its process group.
	syscall.Kill(-pid, syscall.SIGKILL)
	if err != nil {
		if ctx.Err() != nil {
			return results.Result{}, ctx.Err()
		}
		if w.Cmd != "" {
			return results.Result{}, fmt.Errorf("workload command (mode %s): %w", w.Mode, err)
		}
		return results.Result{}, fmt.Errorf("workload %s on %s: %w", w.Mode, w.Device, err)
	}
	var r results.Result
	if w.Cmd == "" {
		if err := json.Unmarshal(out, &r); err != nil {
			return results.Result{}, fmt.Errorf("workload output: %w", err)
		}
	} else {
		r.WallS = wall.Seconds()
	}
	u := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r.CPUS = float64(syscall.TimevalToNsec(u.Utime)+syscall.TimevalToNsec(u.Stime)) / 1e9
	return r, nil
}

// Destroy stops the co-runners and removes the cgroups. A process left
// in one of our cgroups (a command's stray child) is ours: it is killed.
func (e *env) Destroy() error {
	e.once.Do(func() {
		corunner.StopAll(e.builtin)
		for _, c := range e.corunners {
			c.kill()
		}
		var errs []error
		for _, g := range e.groups {
			killMembers(g)
			if err := g.Remove(); err != nil {
				errs = append(errs, err)
			}
		}
		e.err = errors.Join(errs...)
	})
	return e.err
}

// CanIsolate implements backend.IsolationChecker.
func (Backend) CanIsolate() error { return CanIsolate() }

var _ backend.IsolationChecker = Backend{}

// sweepStale removes the cgroups that a run killed without a chance to
// clean up (SIGKILL, a crash) left behind: vgpu-probe-run-PID-* whose PID
// is no longer running. Their processes died with that run (they are
// killed with their parent), so any member left is a stray and is killed.
// It returns what it removed.
func sweepStale() []string {
	var removed []string
	dir := cgroupParent()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	v, _ := cpucap.Detect()
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "vgpu-probe-run-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // that run is still going
		}
		g := &cpucap.Group{Path: filepath.Join(dir, e.Name()), Version: v}
		killMembers(g)
		if g.Remove() == nil {
			removed = append(removed, g.Path)
		}
	}
	return removed
}

var sweepOnce sync.Once

// killMembers kills every process in g: a group made by this package holds
// only processes it started.
func killMembers(g *cpucap.Group) {
	b, err := os.ReadFile(filepath.Join(g.Path, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
