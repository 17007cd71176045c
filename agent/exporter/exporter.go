package exporter

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

// Source is what the exporter serves (*monitor.Monitor).
type Source interface {
	Snapshot() model.Snapshot
	Timeline(name string, last time.Duration) ([]model.TimelineEvent, error)
}

var _ Source = (*monitor.Monitor)(nil)

// MaxTimelineSeconds bounds /api/v1/timeline's seconds parameter.
const MaxTimelineSeconds = 3600

// collector is one group of metrics, computed from a snapshot.
type collector interface {
	describe(ch chan<- *prometheus.Desc)
	update(ch chan<- prometheus.Metric, snap *model.Snapshot) error
}

type named struct {
	name string
	c    collector
}

var registered []named

// register is called from the init of each collector's file.
func register(name string, c collector) { registered = append(registered, named{name, c}) }

var (
	scrapeSuccess = prometheus.NewDesc(prometheus.BuildFQName(namespace, "scrape", "collector_success"),
		"Whether a collector succeeded.", []string{"collector"}, nil)
	scrapeDuration = prometheus.NewDesc(prometheus.BuildFQName(namespace, "scrape", "collector_duration_seconds"),
		"How long a collector took.", []string{"collector"}, nil)
)

// Collector is a prometheus.Collector over a Source: one snapshot per
// scrape, shared by every collector; a failing collector shows up as
// vgpu_probe_scrape_collector_success 0 without blanking the others.
type Collector struct {
	src Source
	log zerolog.Logger
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the agent's Prometheus collector.
func NewCollector(src Source, log zerolog.Logger) *Collector { return &Collector{src: src, log: log} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scrapeSuccess
	ch <- scrapeDuration
	for _, n := range registered {
		n.c.describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.src.Snapshot()
	for _, n := range registered {
		start := time.Now()
		ok := 1.0
		if err := n.c.update(ch, &snap); err != nil {
			c.log.Error().Err(err).Str("collector", n.name).Msg("collector failed")
			ok = 0
		}
		ch <- prometheus.MustNewConstMetric(scrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds(), n.name)
		ch <- prometheus.MustNewConstMetric(scrapeSuccess, prometheus.GaugeValue, ok, n.name)
	}
}

// NewHandler serves /metrics, /api/v1/snapshot and /api/v1/timeline;
// extra collectors (the GPU's) are served on /metrics too.
func NewHandler(src Source, log zerolog.Logger, extra ...prometheus.Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, c := range append([]prometheus.Collector{
		NewCollector(src, log),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, extra...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: zerologAdapter{log}}))
	mux.HandleFunc("GET /api/v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, src.Snapshot())
	})
	mux.HandleFunc("GET /api/v1/timeline", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("domain")
		if name == "" {
			writeJSON(w, http.StatusBadRequest, apiError{"missing domain parameter"})
			return
		}
		secs := 10.0
		if s := r.URL.Query().Get("seconds"); s != "" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0) || v > MaxTimelineSeconds {
				writeJSON(w, http.StatusBadRequest, apiError{"seconds must be a number in (0, 3600]"})
				return
			}
			secs = v
		}
		evs, err := src.Timeline(name, time.Duration(secs*float64(time.Second)))
		if errors.Is(err, monitor.ErrUnknownTarget) {
			writeJSON(w, http.StatusNotFound, apiError{err.Error()})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, apiError{err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, timeline{Domain: name, Seconds: secs, Events: evs})
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("vgpu-probe agent\n\n/metrics\n/api/v1/snapshot\n/api/v1/timeline?domain=NAME&seconds=N\n"))
	})
	return mux, nil
}

type apiError struct {
	Error string `json:"error"`
}

type timeline struct {
	Domain  string                `json:"domain"`
	Seconds float64               `json:"seconds"`
	Events  []model.TimelineEvent `json:"events"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

// zerologAdapter lets promhttp log through zerolog.
type zerologAdapter struct{ log zerolog.Logger }

func (z zerologAdapter) Println(v ...any) { z.log.Error().Msgf("%v", v...) }
