// Package agent is `vgpu-probe agent`: the host agent that measures the
// vCPU discontinuity of every VM (found in /proc, or through libvirt) or
// of given processes and cgroups with eBPF, and serves it to Prometheus, or measures once and
// prints a snapshot.
package agent

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/daemon"
	"github.com/vgpu-probe/vgpu-probe/agent/discover"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

// DefaultListen is loopback only: the metrics name the VMs of the host.
const DefaultListen = "127.0.0.1:9477"

// Options are the agent's flags (daemon.Config) and the command's context.
type Options struct {
	daemon.Config
	Ctx context.Context
}

// NewCmd returns the agent command; runF replaces the run in tests.
func NewCmd(runF func(*Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Measure vCPU discontinuity with eBPF and export it (Prometheus, JSON)",
		Long: `agent watches the vCPU threads of every VM on the host: every QEMU, Cloud
Hypervisor, Firecracker and crosvm process, found by what it is (--discover,
the default when no target is given), and/or every running libvirt domain
(--libvirt-uri; with --discover too, a VM libvirt describes is one target),
and/or all threads of given processes (--pid) and cgroups (--cgroup), with
eBPF programs on the scheduler's switch and wake-up tracepoints. Per thread
it measures run and off-CPU intervals, involuntary preemptions, wake-up
latency, bandwidth throttling and who took the CPU, and estimates the
expected and remaining time slice.

Totals and rates (run and wait time, switches, preemptions, steal) come
from the kernel's own per-thread accounting and miss nothing. The eBPF
programs, which cost a little at every context switch of the host, are
attached only --trace-window out of every --trace-every (1 s in 10 by
default: distributions, co-runners, throttles and timelines are sampled
from those windows). --trace-every 0 keeps them attached; --once does too.

It serves /metrics (Prometheus), /api/v1/snapshot (JSON) and
/api/v1/timeline?domain=NAME&seconds=N on --listen until stopped; with
--once it measures for that long, prints a snapshot and exits. Needs root.`,
		Example: `  vgpu-probe agent --discover
  vgpu-probe agent --discover --libvirt-uri qemu:///system
  vgpu-probe agent --pid 1234 --pid 5678 --listen 0.0.0.0:9477
  vgpu-probe agent --cgroup machine.slice --once 5s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Ctx, o.Out = cmd.Context(), cmd.OutOrStdout()
			if o.Ctx == nil {
				o.Ctx = context.Background()
			}
			if len(o.PIDs) == 0 && len(o.Cgroups) == 0 && o.LibvirtURI == "" {
				o.Discover = true // no target named: every VM on the host
			}
			o.Log = zerolog.New(zerolog.ConsoleWriter{Out: cmd.ErrOrStderr(), NoColor: true}).With().Timestamp().Logger()
			if runF != nil {
				return runF(o)
			}
			return Run(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", DefaultListen, "address to serve /metrics and /api/v1 on")
	f.IntSliceVar(&o.PIDs, "pid", nil, "watch all threads of this process (repeatable)")
	f.StringArrayVar(&o.Cgroups, "cgroup", nil, "watch all threads in this cgroup: absolute path or relative to the cgroup mount, v1 or v2 (repeatable)")
	f.StringVar(&o.LibvirtURI, "libvirt-uri", "", "watch the vCPU threads of every running domain of this libvirtd (e.g. qemu:///system)")
	f.BoolVar(&o.Discover, "discover", false, "watch every VM process on the host (QEMU, Cloud Hypervisor, Firecracker, crosvm), found in /proc every 2 s; the default when no target is given")
	f.DurationVar(&o.Once, "once", 0, "measure for this long, print a snapshot and exit")
	f.BoolVar(&o.JSON, "json", false, "with --once: print the snapshot as JSON")
	f.DurationVar(&o.Window, "window", time.Minute, "span over which distributions and rates are computed")
	f.DurationVar(&o.TraceEvery, "trace-every", 10*time.Second, "attach the eBPF programs once per this period (0: keep them attached)")
	f.DurationVar(&o.TraceWindow, "trace-window", time.Second, "for this long each period")
	f.BoolVar(&o.NVML, "nvml", false, "also export GPU utilisation, clocks and memory from NVML on /metrics (a host without a GPU is logged once)")
	f.StringVar(&o.Mitigate, "mitigate", "", "give the watched threads a short EEVDF slice while another process competes for their CPU, so they preempt co-runners as soon as they wake: "+mitigate.Usage+" (off by default; needs Linux 6.12+)")
	f.StringVar(&o.WebConfigFile, "web.config.file", "", "exporter-toolkit web config: TLS and basic auth for --listen (see docs/agent.md)")
	f.StringVar(&o.Hints, "hints", "", "publish a remaining-time-slice hint page per target in this directory: "+hints.DefaultDir+" (made if missing) or another owned by root and writable by no one else (keeps the eBPF programs attached)")
	f.StringVar(&o.TrustUsers, "trust-users", "", "with --discover: the users (names or uids, comma separated) whose hypervisor processes are VMs; default "+strings.Join(discover.HypervisorUsers, ",")+" (those this host has), and KubeVirt's qemu (uid 107) inside a Kubernetes pod")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{
		"cgroup":          complete.Dirs,
		"hints":           complete.Dirs,
		"trust-users":     complete.List(discover.HypervisorUsers...),
		"mitigate":        complete.Mitigate,
		"web.config.file": complete.Files("yml", "yaml"),
	})
	cmd.AddCommand(newHintsXML(), newHintsArgs())
	return cmd
}

// Validate checks the flags alone (daemon.Config.Validate): a bad one is
// bad input.
func (o *Options) Validate() error { return usage.Wrap(o.Config.Validate()) }

// Run checks the flags and runs the agent; what was asked and cannot be
// done (a missing target, a capability the process lacks) is bad input.
func Run(o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	err := daemon.Run(o.Ctx, &o.Config)
	if errors.Is(err, daemon.ErrRequest) {
		return usage.Wrap(err)
	}
	return err
}
