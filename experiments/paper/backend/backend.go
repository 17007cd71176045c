// Package backend is the seam between the experiment runner and what
// realises an experiment's VMs: the GPU runner VM and the co-runner VMs,
// each with N vCPUs pinned to a CPU set they share, with or without CPU
// bandwidth isolation. The local backend (subpackage local) emulates VMs
// with processes, per-vCPU-thread pinning and cgroups; a libvirt backend
// implements the same interface with real domains (vcpupin, <cputune>).
package backend

import (
	"context"
	"errors"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// ErrNoIsolation means the backend cannot apply CPU bandwidth isolation
// here (e.g. the local backend without the rights to create cgroups). The
// runner skips the scenarios that need it and says so.
var ErrNoIsolation = errors.New("cpu bandwidth isolation unavailable")

// VM is one emulated or real virtual machine.
type VM struct {
	Name string // unique within a Topology, e.g. "runner", "corunner1"
	// CPUs pins vCPU i to CPUs[i]: len(CPUs) is the vCPU count.
	CPUs []int
	// QuotaCPUs limits the VM to this much CPU bandwidth, in CPUs (0.5 =
	// half of one CPU); 0 means unlimited.
	QuotaCPUs float64
}

// Topology is one configuration of VMs.
type Topology struct {
	Runner    VM
	Corunners []VM
	// Period is the CPU bandwidth period of any quota.
	Period time.Duration
}

// Load is what the co-runner VMs run: a built-in kind or a command.
type Load struct {
	Kind string // while1, matmul, stream
	Cmd  string // a shell command, restarted if it exits; used when set
}

// Workload is what the runner VM runs for one measurement.
type Workload struct {
	// The built-in NAMD-like loop: Config, on Device, waiting with Mode.
	Config workload.Config
	Device string
	Mode   hybridsync.Mode
	// Cmd, when set, is run instead (with sh -c), with HYBRIDSYNC_MODE=Mode
	// in its environment; its wall time is the measurement.
	Cmd string
	// Hold, when set (built-in loop only), is called once the loop has
	// finished and measured, and the runner's process stays alive until it
	// returns: a watcher such as the agent then sees the runner for its
	// whole window however short the loop was.
	Hold func()
}

// Backend creates topologies.
type Backend interface {
	Name() string
	// Create makes the VMs of t, applies their isolation and starts the
	// co-runners running co. It returns an error wrapping ErrNoIsolation
	// when t asks for quotas it cannot apply. On error nothing is left.
	Create(ctx context.Context, t Topology, co Load) (Env, error)
}

// Env is a created topology.
type Env interface {
	// Run runs w in the runner VM and returns what it measured; started,
	// if not nil, is called with the runner's process id once it runs
	// (for the agent to watch). Cancelling ctx stops it.
	Run(ctx context.Context, w Workload, started func(pid int)) (results.Result, error)
	// Corunners returns the process ids of the co-runner VMs.
	Corunners() []int
	// Destroy stops and removes everything Create made; safe to call
	// more than once.
	Destroy() error
}

// IsolationChecker is a Backend that can tell in advance whether it can
// apply CPU bandwidth isolation, so the runner can skip those scenarios
// before it starts rather than fail halfway.
type IsolationChecker interface {
	// CanIsolate returns nil, or an error wrapping ErrNoIsolation that
	// says why not.
	CanIsolate() error
}
