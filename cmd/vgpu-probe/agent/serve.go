package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

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
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	o.Log.Info().Str("listen", ln.Addr().String()).Msg("serving /metrics, /api/v1/snapshot, /api/v1/timeline")
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down HTTP server: %w", err)
	}
	return nil
}
