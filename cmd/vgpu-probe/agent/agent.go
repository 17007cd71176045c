// Package agent is `vgpu-probe agent`: the host agent that measures the
// vCPU discontinuity of every VM (libvirt) or of given processes and
// cgroups with eBPF, and serves it to Prometheus, or measures once and
// prints a snapshot.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/nvml"
)

// DefaultListen is loopback only: the metrics name the VMs of the host.
const DefaultListen = "127.0.0.1:9477"

// rescan is how often pid and cgroup targets are re-read for new threads.
const rescan = 2 * time.Second

// Options are the agent's flags and dependencies.
type Options struct {
	Listen     string
	PIDs       []int
	Cgroups    []string
	LibvirtURI string
	Once       time.Duration
	JSON       bool
	Window     time.Duration
	NVML       bool
	// Mitigate is --mitigate (mitigate.go): "" is off.
	Mitigate string
	// Hints is --hints (hints.go): the page directory, "" is off.
	Hints string
	// TraceEvery and TraceWindow: see monitor.Options.
	TraceEvery, TraceWindow time.Duration
	// WebConfigFile is --web.config.file (serve.go): "" is plain HTTP.
	WebConfigFile string

	Ctx context.Context
	Out io.Writer
	Log zerolog.Logger

	// Dependencies, replaced in tests.
	Geteuid    func() int
	LoadProbe  func(bpfload.Options) (*bpfload.Probe, error)
	NewLibvirt func(uri string, log zerolog.Logger) (targets.Source, error)
	OpenNVML   func() gonvml.Interface
	Sched      mitigate.Sched // nil: the kernel's

	// Capabilities returns the effective set (caps.go); nil: the process's.
	Capabilities func() (CapSet, error)
}

// NewCmd returns the agent command; runF replaces the run in tests.
func NewCmd(runF func(*Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Measure vCPU discontinuity with eBPF and export it (Prometheus, JSON)",
		Long: `agent watches the vCPU threads of every running libvirt domain (--libvirt-uri),
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
		Example: `  vgpu-probe agent --libvirt-uri qemu:///system
  vgpu-probe agent --pid 1234 --pid 5678 --listen 0.0.0.0:9477
  vgpu-probe agent --cgroup machine.slice --once 5s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Ctx, o.Out = cmd.Context(), cmd.OutOrStdout()
			if o.Ctx == nil {
				o.Ctx = context.Background()
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
	f.DurationVar(&o.Once, "once", 0, "measure for this long, print a snapshot and exit")
	f.BoolVar(&o.JSON, "json", false, "with --once: print the snapshot as JSON")
	f.DurationVar(&o.Window, "window", time.Minute, "span over which distributions and rates are computed")
	f.DurationVar(&o.TraceEvery, "trace-every", 10*time.Second, "attach the eBPF programs once per this period (0: keep them attached)")
	f.DurationVar(&o.TraceWindow, "trace-window", time.Second, "for this long each period")
	f.BoolVar(&o.NVML, "nvml", false, "also export GPU utilisation, clocks and memory from NVML on /metrics (a host without a GPU is logged once)")
	addMitigateFlag(f, o)
	addWebConfigFlag(f, o)
	addHints(cmd, o)
	return cmd
}

// Validate checks the flags alone (no system access).
func (o *Options) Validate() error {
	if len(o.PIDs) == 0 && len(o.Cgroups) == 0 && o.LibvirtURI == "" {
		return usage.Errorf("nothing to watch: give --libvirt-uri, --pid or --cgroup")
	}
	if o.Once < 0 {
		return usage.Errorf("--once %v: must be positive", o.Once)
	}
	if o.JSON && o.Once == 0 {
		return usage.Errorf("--json needs --once DURATION (the server serves JSON at /api/v1/snapshot)")
	}
	if o.Window <= 0 {
		return usage.Errorf("--window %v: must be positive", o.Window)
	}
	if o.TraceEvery < 0 || (o.TraceEvery > 0 && o.TraceWindow <= 0) {
		return usage.Errorf("--trace-every %v --trace-window %v: want a period of 0 (always attached) or a positive period and window", o.TraceEvery, o.TraceWindow)
	}
	if o.TraceEvery > 0 && o.TraceEvery > o.Window {
		return usage.Errorf("--trace-every %v is longer than --window %v: some windows would hold no trace", o.TraceEvery, o.Window)
	}
	if o.Once == 0 {
		if _, _, err := net.SplitHostPort(o.Listen); err != nil {
			return usage.Errorf("--listen %q: want HOST:PORT", o.Listen)
		}
	}
	if err := o.validateMitigate(); err != nil {
		return err
	}
	if err := o.validateWeb(); err != nil {
		return err
	}
	for _, p := range o.PIDs {
		if p <= 0 {
			return usage.Errorf("--pid %d: not a process id", p)
		}
	}
	return nil
}

func (o *Options) defaults() {
	if o.Geteuid == nil {
		o.Geteuid = os.Geteuid
	}
	if o.LoadProbe == nil {
		o.LoadProbe = bpfload.Load
	}
	if o.NewLibvirt == nil {
		o.NewLibvirt = newLibvirtSource
	}
}

// Run is the agent.
func Run(o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o.defaults()
	// A handful of goroutines (ring reader, sampler, sources, HTTP) need
	// no more than two Ps; on a many-core host the idle Ps' spinning for
	// work would be most of the agent's CPU (measured: 1.06% -> see
	// docs/BENCHMARKS.md). An explicit GOMAXPROCS wins.
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > 2 {
		runtime.GOMAXPROCS(2)
	}
	if o.Geteuid() != 0 {
		return usage.Errorf("vgpu-probe agent must run as root: it loads eBPF programs and reads other processes' threads")
	}
	if err := o.checkCaps(); err != nil {
		return err
	}
	// Totals and rates come from the kernel's per-thread accounting: a
	// kernel without it would leave every thread unwatched.
	if _, err := procstat.Read(os.Getpid()); err != nil {
		return fmt.Errorf("reading the kernel's per-thread scheduler counters (needs CONFIG_SCHED_INFO): %w", err)
	}
	sources, closeSources, err := o.sources()
	if err != nil {
		return err
	}
	defer closeSources()
	sources, mitigation, stopMitigation, err := o.mitigateSources(sources)
	if err != nil {
		return err
	}
	defer stopMitigation() // after the monitor stops (defers run last first)
	sources, pub, err := o.hintSources(sources, mitigation)
	if err != nil {
		return err
	}

	probe, err := o.LoadProbe(bpfload.Options{Events: true, WakeEveryEvent: pub != nil, Self: uint32(os.Getpid()), Log: o.Log})
	if err != nil {
		return fmt.Errorf("loading eBPF programs: %w", err)
	}
	defer probe.Close()
	o.Log.Info().Str("attach", probe.Mode()).Msg("eBPF programs attached")

	ctx, cancel := context.WithCancel(o.Ctx)
	defer cancel()
	mo := monitor.Options{Log: o.Log, Window: o.Window, SampleEvery: min(10*time.Second, o.Window/6),
		TraceEvery: o.TraceEvery, TraceWindow: o.TraceWindow}
	if o.Once > 0 {
		mo.TraceEvery = 0 // a one-off measurement traces all of it
	}
	defer startHints(ctx, &mo, pub, probe)()
	m := monitor.New(probe, mo)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, sources...)
	}()
	defer func() { cancel(); <-done }()

	if o.Once > 0 {
		return o.once(ctx, m)
	}
	return o.serve(ctx, m)
}

// sources builds the discovery sources, failing with a user error for a
// pid, cgroup or libvirt URI that does not exist or answer.
func (o *Options) sources() ([]targets.Source, func(), error) {
	var (
		out     []targets.Source
		closers []func()
	)
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for _, pid := range o.PIDs {
		s, err := targets.NewPID(pid, rescan)
		if errors.Is(err, targets.ErrNoProcess) {
			return nil, nil, usage.Errorf("--pid %d: no such process", pid)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("--pid %d: %w", pid, err)
		}
		out = append(out, s)
	}
	for _, cg := range o.Cgroups {
		s, err := targets.NewCgroup(cg, rescan)
		if err != nil {
			return nil, nil, usage.Errorf("--cgroup: %v", err)
		}
		out = append(out, s)
	}
	if o.LibvirtURI != "" {
		s, err := o.NewLibvirt(o.LibvirtURI, o.Log)
		if err != nil {
			closeAll()
			return nil, nil, usage.Errorf("--libvirt-uri %q: %v", o.LibvirtURI, err)
		}
		if c, ok := s.(interface{ Close() }); ok {
			closers = append(closers, c.Close)
		}
		out = append(out, s)
	}
	return out, closeAll, nil
}

// once measures for o.Once and prints one snapshot.
func (o *Options) once(ctx context.Context, m *monitor.Monitor) error {
	// pid and cgroup targets exist by now (their sources checked them);
	// wait for the monitor to have taken them in before the clock starts.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err := m.WaitTargets(wctx, len(o.PIDs)+len(o.Cgroups))
	wcancel()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("starting to watch targets: %w", err)
	}
	select {
	case <-time.After(o.Once):
	case <-ctx.Done():
		// Interrupted: still print what was measured so far.
	}
	snap := m.Snapshot()
	if o.JSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(snap); err != nil {
			return fmt.Errorf("writing snapshot: %w", err)
		}
		return nil
	}
	return writeTable(o.Out, &snap)
}

// openGPUs opens NVML for --nvml. Without a GPU or NVML the agent logs it
// once and serves everything else.
func (o *Options) openGPUs() *nvml.Sampler {
	open := o.OpenNVML
	if open == nil {
		open = func() gonvml.Interface { return gonvml.New() }
	}
	s, err := nvml.Open(open())
	if err != nil {
		o.Log.Warn().Err(err).Msg("--nvml: GPU metrics not exported")
		return nil
	}
	o.Log.Info().Int("gpus", len(s.Devices())).Msg("exporting GPU metrics from NVML")
	return s
}

// writeTable prints one row per thread; a "gone" column, there only when
// something went, says how long before the snapshot each gone thread went.
func writeTable(w io.Writer, snap *model.Snapshot) error {
	anyGone := slices.ContainsFunc(snap.Targets, func(t model.Target) bool {
		return slices.ContainsFunc(t.Threads, func(th model.Thread) bool { return th.Gone })
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\tkind\ttid\tvcpu\trun s\toff s\tpreempt\trun p50 µs\toff p50 µs\twake p50 µs\tsteal\tslice µs\t")
	if anyGone {
		fmt.Fprintf(tw, "gone\t")
	}
	fmt.Fprintln(tw)
	for _, t := range snap.Targets {
		for _, th := range t.Threads {
			vcpu := "-"
			if th.VCPU >= 0 {
				vcpu = strconv.Itoa(th.VCPU)
			}
			slice := "inf"
			if th.ExpectedSliceUS != nil {
				slice = fmt.Sprintf("%.0f", *th.ExpectedSliceUS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.3f\t%.3f\t%d\t%.0f\t%.0f\t%.1f\t%.2f\t%s\t",
				t.Name, t.Kind, th.TID, vcpu, th.RunSeconds, th.OffCPUSeconds, th.Preemptions,
				th.RunP50US, th.OffCPUP50US, th.WakeP50US, th.StealFraction, slice)
			if anyGone {
				fmt.Fprintf(tw, "%s\t", goneCell(snap.Time, &th))
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

// goneCell is "-" for a live thread, else how long before the snapshot it
// went ("1.5s ago").
func goneCell(at time.Time, th *model.Thread) string {
	if !th.Gone {
		return "-"
	}
	return fmt.Sprintf("%.1fs ago", max(0, at.Sub(th.GoneAt).Seconds()))
}
