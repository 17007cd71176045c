package daemon

import (
	"net"

	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
)

// Validate checks the flags alone (no system access, but for reading
// --web.config.file and the certificate files it names, so that a bad one
// fails before any eBPF is loaded). Every error wraps ErrRequest.
func (c *Config) Validate() error {
	if len(c.PIDs) == 0 && len(c.Cgroups) == 0 && c.LibvirtURI == "" && !c.Discover {
		return requestErrorf("nothing to watch: give --discover, --libvirt-uri, --pid or --cgroup")
	}
	if c.Once < 0 {
		return requestErrorf("--once %v: must be positive", c.Once)
	}
	if c.JSON && c.Once == 0 {
		return requestErrorf("--json needs --once DURATION (the server serves JSON at /api/v1/snapshot)")
	}
	if c.Window <= 0 {
		return requestErrorf("--window %v: must be positive", c.Window)
	}
	if c.TraceEvery < 0 || (c.TraceEvery > 0 && c.TraceWindow <= 0) {
		return requestErrorf("--trace-every %v --trace-window %v: want a period of 0 (always attached) or a positive period and window", c.TraceEvery, c.TraceWindow)
	}
	if c.TraceEvery > 0 && c.TraceEvery > c.Window {
		return requestErrorf("--trace-every %v is longer than --window %v: some windows would hold no trace", c.TraceEvery, c.Window)
	}
	if c.Once == 0 {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return requestErrorf("--listen %q: want HOST:PORT", c.Listen)
		}
	}
	if c.Mitigate != "" {
		if _, err := mitigate.Parse(c.Mitigate); err != nil {
			return requestErrorf("%v", err)
		}
	}
	if c.WebConfigFile != "" {
		if c.Once > 0 {
			return requestErrorf("--web.config.file configures the server: it has no use with --once")
		}
		if err := exporter.ValidateWebConfig(c.WebConfigFile); err != nil {
			return requestErrorf("--web.config.file %s: %v", c.WebConfigFile, err)
		}
	}
	for _, p := range c.PIDs {
		if p <= 0 {
			return requestErrorf("--pid %d: not a process id", p)
		}
	}
	return nil
}
