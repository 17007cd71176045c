package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/assembly"
	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/discover"
	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// rescan is how often pid and cgroup targets are re-read for new threads.
const rescan = 2 * time.Second

// Config is what the agent does, as its flags say it, and its
// dependencies. Run expects a Config that Validate accepted (a positive
// Window, a HOST:PORT Listen, a Mitigate that parses).
type Config struct {
	Listen     string
	PIDs       []int
	Cgroups    []string
	LibvirtURI string
	// Discover is --discover: every VM process on the host (agent/discover).
	Discover bool
	// TrustUsers is --trust-users: the users (names or uids, comma
	// separated) whose hypervisor processes --discover adopts; "" is
	// discover.DefaultTrust.
	TrustUsers string
	Once       time.Duration
	JSON       bool
	Window     time.Duration
	NVML       bool
	// Mitigate is --mitigate (mitigate.Parse's syntax): "" is off.
	Mitigate string
	// Hints is --hints: the page directory, "" is off.
	Hints string
	// TraceEvery and TraceWindow: see monitor.Options.
	TraceEvery, TraceWindow time.Duration
	// WebConfigFile is --web.config.file: "" is plain HTTP.
	WebConfigFile string
	Out           io.Writer
	Log           zerolog.Logger

	// Dependencies, replaced in tests; nil: the real ones.
	// StateDir is where the locks and the slice journal are kept
	// (agent/runstate); "" is runstate.DefaultDir, host-wide, as every
	// agent must share it: a test keeps its agents to themselves with
	// its own.
	StateDir   string
	Geteuid    func() int
	LoadProbe  func(bpfload.Options) (*bpfload.Probe, error)
	NewLibvirt func(uri string, log zerolog.Logger) (targets.Source, error)
	OpenNVML   func() gonvml.Interface
	Sched      mitigate.Sched
	// Capabilities returns the effective set (caps.go).
	Capabilities func() (CapSet, error)
}

// ErrRequest is wrapped by errors caused by what was asked rather than
// by the work; the message is the user's one line, without this one's.
var ErrRequest = errors.New("bad request")

type requestError struct{ msg string }

func (e *requestError) Error() string        { return e.msg }
func (e *requestError) Is(target error) bool { return target == ErrRequest }

// requestErrorf formats an error wrapping ErrRequest.
func requestErrorf(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

func (c *Config) defaults() {
	if c.Geteuid == nil {
		c.Geteuid = os.Geteuid
	}
	if c.LoadProbe == nil {
		c.LoadProbe = bpfload.Load
	}
	if c.NewLibvirt == nil {
		c.NewLibvirt = newLibvirtSource
	}
}

// Run is the agent, until ctx ends (or, with Once, for that long).
func Run(ctx context.Context, c *Config) error {
	c.defaults()
	// A handful of goroutines (ring reader, sampler, sources, HTTP) need
	// no more than two Ps; on a many-core host the idle Ps' spinning for
	// work would be most of the agent's CPU (docs/tried.md:
	// "GOMAXPROCS at the core count").
	// An explicit GOMAXPROCS wins.
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > 2 {
		runtime.GOMAXPROCS(2)
	}
	if c.Geteuid() != 0 {
		return requestErrorf("vgpu-probe agent must run as root: it loads eBPF programs and reads other processes' threads")
	}
	if err := c.checkCaps(); err != nil {
		return err
	}
	// Totals and rates come from the kernel's per-thread accounting: a
	// kernel without it would leave every thread unwatched.
	if _, err := procstat.Read(os.Getpid()); err != nil {
		return fmt.Errorf("reading the kernel's per-thread scheduler counters (needs CONFIG_SCHED_INFO): %w", err)
	}
	sources, closeSources, err := c.sources()
	if err != nil {
		return err
	}
	defer closeSources()
	ao := assembly.Options{Log: c.Log, Hints: c.Hints, Monitor: true, GateMitigation: true, StateDir: c.StateDir, Sched: c.Sched, LoadProbe: c.LoadProbe,
		MonitorOptions: monitor.Options{Log: c.Log, Window: c.Window, SampleEvery: min(10*time.Second, c.Window/6),
			TraceEvery: c.TraceEvery, TraceWindow: c.TraceWindow},
		MitigateFailed: exporter.Errors.Counter(exporter.ErrorMitigate),
		HintsFailed:    exporter.Errors.Counter(exporter.ErrorHints)}
	if c.Once > 0 {
		ao.MonitorOptions.TraceEvery = 0 // a one-off measurement traces all of it
	}
	if c.Mitigate != "" {
		cfg, err := mitigate.Parse(c.Mitigate)
		if err != nil {
			return requestErrorf("%v", err)
		}
		ao.Mitigation = &cfg
		ao.ClaimProcesses, ao.Claims = c.claims()
	}
	a, err := assembly.Start(ctx, ao)
	if errors.Is(err, assembly.ErrRequest) {
		return requestErrorf("%v", err)
	}
	if err != nil {
		return err
	}
	defer a.Close()
	c.Log.Info().Str("attach", a.Probe().Mode()).Msg("eBPF programs attached")
	a.Follow(sources...)

	if c.Once > 0 {
		return c.once(ctx, a.Monitor())
	}
	return c.serve(ctx, a.Monitor())
}

// claims are what a mitigating agent must own alone from the start: its
// --pid processes, and its cgroups and libvirt URI by name (the
// processes found in them later are claimed as their threads are
// mitigated).
func (c *Config) claims() ([]int, []assembly.Claim) {
	var cl []assembly.Claim
	for _, cg := range c.Cgroups {
		if abs, err := targets.ResolveCgroup(cg); err == nil {
			cg = abs // one lock however the path is written
		}
		cl = append(cl, assembly.Claim{Name: "cgroup-" + url.PathEscape(cg), What: "cgroup " + cg})
	}
	if c.LibvirtURI != "" {
		cl = append(cl, assembly.Claim{Name: "libvirt-" + url.PathEscape(c.LibvirtURI), What: "libvirt " + c.LibvirtURI})
	}
	return c.PIDs, cl
}

// sources builds the discovery sources, failing with a request error for
// a pid, cgroup or libvirt URI that does not exist or answer. With both
// --libvirt-uri and --discover, a VM libvirtd describes is its domain
// target only.
func (c *Config) sources() ([]targets.Source, func(), error) {
	var (
		out     []targets.Source
		closers []func()
	)
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	disc, err := c.discoverOptions()
	if err != nil {
		return nil, nil, err
	}
	for _, pid := range c.PIDs {
		s, err := targets.NewPID(pid, rescan)
		if errors.Is(err, targets.ErrNoProcess) {
			return nil, nil, requestErrorf("--pid %d: no such process", pid)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("--pid %d: %w", pid, err)
		}
		out = append(out, s)
	}
	for _, cg := range c.Cgroups {
		s, err := targets.NewCgroup(cg, rescan)
		if err != nil {
			return nil, nil, requestErrorf("--cgroup: %v", err)
		}
		out = append(out, s)
	}
	if c.LibvirtURI != "" {
		s, err := c.NewLibvirt(c.LibvirtURI, c.Log)
		if err != nil {
			closeAll()
			return nil, nil, requestErrorf("--libvirt-uri %q: %v", c.LibvirtURI, err)
		}
		if cl, ok := s.(interface{ Close() }); ok {
			closers = append(closers, cl.Close)
		}
		if owner, ok := s.(discover.Owner); ok && c.Discover {
			s = discover.Merge(owner, discover.NewSource(disc))
		} else if c.Discover {
			out = append(out, discover.NewSource(disc))
		}
		out = append(out, s)
	} else if c.Discover {
		out = append(out, discover.NewSource(disc))
	}
	return out, closeAll, nil
}

// discoverOptions are --discover's: whom it trusts, and the metrics of
// what it leaves out.
func (c *Config) discoverOptions() (discover.Options, error) {
	o := discover.Options{Log: c.Log, Untrusted: exporter.Discovery.Untrusted, Limited: exporter.Discovery.Limited}
	if c.TrustUsers != "" {
		t, err := discover.ParseTrust(c.TrustUsers, false)
		if err != nil {
			return o, requestErrorf("%v", err)
		}
		o.Trust = &t
	}
	return o, nil
}
