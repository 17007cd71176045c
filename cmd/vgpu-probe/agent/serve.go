package agent

import (
	"context"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func addWebConfigFlag(f *pflag.FlagSet, o *Options) {
	f.StringVar(&o.WebConfigFile, "web.config.file", "", "exporter-toolkit web config: TLS and basic auth for --listen (see docs/agent.md)")
}

// validateWeb reads --web.config.file and the certificate files it names,
// so that a bad one fails at start, before any eBPF is loaded.
func (o *Options) validateWeb() error {
	if o.WebConfigFile == "" {
		return nil
	}
	if o.Once > 0 {
		return usage.Errorf("--web.config.file configures the server: it has no use with --once")
	}
	if err := exporter.ValidateWebConfig(o.WebConfigFile); err != nil {
		return usage.Errorf("--web.config.file %s: %v", o.WebConfigFile, err)
	}
	return nil
}

func (o *Options) serve(ctx context.Context, m *monitor.Monitor) error {
	var extra []prometheus.Collector
	if o.NVML {
		if s := o.openGPUs(); s != nil {
			defer s.Close()
			extra = append(extra, exporter.NewGPUCollector(s))
		}
	}
	h, err := exporter.NewHandler(m, o.Log, extra...)
	if err != nil {
		return fmt.Errorf("building HTTP handler: %w", err)
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.Listen, err)
	}
	o.Log.Info().Str("listen", ln.Addr().String()).Msg("serving /metrics, /api/v1/snapshot, /api/v1/timeline")
	return exporter.Serve(ctx, ln, h, exporter.ServeOptions{WebConfigFile: o.WebConfigFile, Log: o.Log})
}
