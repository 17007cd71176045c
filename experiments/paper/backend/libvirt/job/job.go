// Package job is the protocol between the libvirt experiment backend on the
// host and `vgpu-probe vm-job` in the guest, and the guest's side of it.
//
// The host names the guest's first job on the kernel command line
// (vgpu.job=BASE64), so that a guest needs no host-side action to start a
// co-runner. Everything else goes over one virtio-serial port named
// PortName: the host writes Job lines, the guest answers with Reply lines,
// one JSON object per line, the same results.Result rows the local backend
// produces. A guest that fails says so in an error Reply before it exits.
package job

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// PortName is the virtio-serial port name (libvirt <target name=...>).
const PortName = "org.vgpu-probe.job.0"

// HintPage is where the guest's loop reads the host's hint page: where
// its init mounts it with `vgpu-probe guest --once`.
const HintPage = hintpage.GuestPath

// CmdlineKey is the kernel command line parameter carrying the first job.
const CmdlineKey = "vgpu.job"

// Kinds of jobs.
const (
	// Serve answers "ready", then runs the jobs the host sends until a
	// Poweroff job or the port closes.
	Serve = "serve"
	// Loop runs the NAMD-like loop on the simulated GPU, one thread per
	// vCPU, and answers with its results.Result.
	Loop = "loop"
	// Calibrate answers with the amount of host work (workload.Spin
	// units) that takes HostNs on this vCPU, measured here, alone.
	Calibrate = "calibrate"
	// Gaps spins on every vCPU for Seconds and answers with the gaps in
	// the guest's clock: the time each vCPU was not running, as a guest
	// without steal time can see it.
	Gaps = "gaps"
	// Corunner runs a co-runner on every vCPU until the guest is
	// destroyed; it answers "ready" once the loops run.
	Corunner = "corunner"
	// Ping answers at once with the guest's clock, to relate it to the
	// host's.
	Ping = "ping"
	// Command runs Argv, with Env added to the guest's environment, and
	// answers with its exit status, wall time and stderr, and the file
	// File as the command left it: how a test runs a program of the
	// image (make vmimage-openmp) and reads what it wrote.
	Command = "command"
	// Poweroff ends Serve; the guest's init then powers it off.
	Poweroff = "poweroff"
)

// Job is one thing for the guest to do.
type Job struct {
	ID   int    `json:"id"`
	Kind string `json:"kind"`
	// Loop.
	Config workload.Config `json:"config,omitzero"`
	Mode   hybridsync.Mode `json:"mode,omitempty"`
	// Threshold is where the loop's waits take the remaining slice from
	// (workload.Threshold*): hints reads HintPage, the page `vgpu-probe
	// guest` exposes; "" leaves it to the guest's environment.
	Threshold string `json:"threshold,omitempty"`
	// Calibrate.
	HostNs int64 `json:"host_ns,omitempty"`
	// Gaps.
	Seconds float64 `json:"seconds,omitempty"`
	// Corunner: while1, matmul or stream.
	Corunner string `json:"corunner,omitempty"`
	// Command: the program and its arguments, NAME=VALUE pairs for its
	// environment, and a file to send back once it has exited ("":
	// none; removed before the command starts, so that what comes back
	// is this run's).
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	File string   `json:"file,omitempty"`
}

// Validate rejects a job the guest cannot run, before it is sent.
func (j Job) Validate() error {
	switch j.Kind {
	case Serve, Ping, Poweroff:
	case Loop:
		// A Mode decoded from JSON is one of them; one set in Go may not be.
		if !slices.Contains(hybridsync.Modes(), j.Mode.String()) {
			return fmt.Errorf("loop job: unknown mode %v (want one of %v)", j.Mode, hybridsync.Modes())
		}
		if j.Threshold != "" && !slices.Contains(workload.Thresholds, j.Threshold) {
			return fmt.Errorf("loop job: unknown threshold %q (want one of %v)", j.Threshold, workload.Thresholds)
		}
		if j.Config.Steps <= 0 || j.Config.Work < 0 || len(j.Config.Profile.Kernels) == 0 {
			return errors.New("loop job: want steps > 0, work >= 0 and a kernel")
		}
	case Calibrate:
		if j.HostNs <= 0 {
			return errors.New("calibrate job: want host_ns > 0")
		}
	case Gaps:
		if j.Seconds <= 0 || j.Seconds > 600 {
			return errors.New("gaps job: want 0 < seconds <= 600")
		}
	case Corunner:
		if !corunner.Valid(j.Corunner) {
			return fmt.Errorf("corunner job: unknown co-runner %q (want one of %v)", j.Corunner, corunner.Kinds)
		}
	case Command:
		if len(j.Argv) == 0 || j.Argv[0] == "" {
			return errors.New("command job: no program")
		}
		for _, kv := range j.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("command job: environment entry %q is not NAME=VALUE", kv)
			}
		}
	default:
		return fmt.Errorf("unknown job kind %q", j.Kind)
	}
	return nil
}

// Cmdline returns "vgpu.job=BASE64" for the kernel command line. The
// encoding has no spaces or quotes, which the kernel would split on.
func (j Job) Cmdline() (string, error) {
	if err := j.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return "", err
	}
	return CmdlineKey + "=" + base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseCmdlineValue decodes the value of vgpu.job=.
func ParseCmdlineValue(v string) (Job, error) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return Job{}, fmt.Errorf("%s: not base64url: %w", CmdlineKey, err)
	}
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return Job{}, fmt.Errorf("%s: %w", CmdlineKey, err)
	}
	return j, j.Validate()
}

// Reply types.
const (
	TypeReady  = "ready"
	TypeResult = "result"
	TypeError  = "error"
)

// Reply is one line from the guest.
type Reply struct {
	Type string `json:"type"`
	ID   int    `json:"id"` // the job's
	// GuestNs is the guest's CLOCK_MONOTONIC when the reply was made.
	GuestNs int64  `json:"guest_ns"`
	CPUs    int    `json:"cpus,omitempty"` // ready: the guest's vCPUs
	Error   string `json:"error,omitempty"`
	// Result of a loop job: the loop's own measurements and the guest
	// process's CPU time.
	Result *results.Result `json:"result,omitempty"`
	// Work of a calibrate job.
	Work int64 `json:"work,omitempty"`
	// Gaps of a gaps job, one entry per vCPU.
	Gaps []VCPUGaps `json:"gaps,omitempty"`
	// Command of a command job.
	Command *CommandResult `json:"command,omitempty"`
}

// Limits on what a command job sends back: the job port carries one line
// per reply, which the host reads whole.
const (
	MaxStderr = 64 << 10 // the end of the command's stderr
	MaxFile   = 1 << 20  // the file; a larger one is an error
)

// CommandResult is what a command job did.
type CommandResult struct {
	// ExitCode is the command's exit status (-1: killed by a signal).
	ExitCode int `json:"exit_code"`
	// WallS is from its start to its exit, on the guest's clock.
	WallS float64 `json:"wall_s"`
	// Stderr is the last MaxStderr bytes of its stderr.
	Stderr string `json:"stderr"`
	// File is Job.File's content; FileError why there is none.
	File      string `json:"file,omitempty"`
	FileError string `json:"file_error,omitempty"`
}

// VCPUGaps is what one vCPU saw of its own discontinuity while spinning.
type VCPUGaps struct {
	VCPU    int     `json:"vcpu"`
	StartNs int64   `json:"start_ns"` // guest CLOCK_MONOTONIC
	EndNs   int64   `json:"end_ns"`
	Count   int     `json:"count"`
	TotalS  float64 `json:"total_s"` // sum of the gaps
	// LongS sums the gaps of LongGap or more: whole host scheduling
	// slices, leaving out the guest's own interrupt handling, which under
	// TCG takes tens to hundreds of µs of the vCPU's time.
	LongS float64 `json:"long_s"`
	MaxUS float64 `json:"max_us"`
	P50US float64 `json:"p50_us"`
}
