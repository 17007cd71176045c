package daemon

import (
	"context"
	"fmt"
	"net"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/nvml"
)

// serve serves m's metrics and API on c.Listen until ctx ends.
func (c *Config) serve(ctx context.Context, m *monitor.Monitor) error {
	var extra []prometheus.Collector
	if c.NVML {
		if s := c.openGPUs(); s != nil {
			defer s.Close()
			extra = append(extra, exporter.NewGPUCollector(s))
		} else {
			extra = append(extra, exporter.NewGPUUnavailable())
		}
	}
	h, err := exporter.NewHandler(m, c.Log, extra...)
	if err != nil {
		return fmt.Errorf("building HTTP handler: %w", err)
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", c.Listen, err)
	}
	c.Log.Info().Str("listen", ln.Addr().String()).Msg("serving /metrics, /api/v1/snapshot, /api/v1/timeline")
	err = exporter.Serve(ctx, ln, h, exporter.ServeOptions{WebConfigFile: c.WebConfigFile, Log: c.Log})
	h.Wait() // a collection a scrape started reads the monitor, which Run closes next
	return err
}

// openGPUs opens NVML for --nvml. Without a GPU or NVML the agent logs it
// once, exports collector_success{collector="gpu"} 0 and serves
// everything else.
func (c *Config) openGPUs() *nvml.Sampler {
	open := c.OpenNVML
	if open == nil {
		open = func() gonvml.Interface { return gonvml.New() }
	}
	s, err := nvml.Open(open())
	if err != nil {
		c.Log.Warn().Err(err).Msg("--nvml: GPU metrics not exported")
		return nil
	}
	c.Log.Info().Int("gpus", len(s.Devices())).Msg("exporting GPU metrics from NVML")
	return s
}
