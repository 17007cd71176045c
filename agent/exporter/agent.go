package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
)

var (
	dropsTotal = prometheus.NewDesc(prometheus.BuildFQName(namespace, "agent", "ring_drops_total"),
		"Switch events lost because the BPF ring buffer was full (timelines have gaps; counters do not).", nil, nil)
	targetsGauge = prometheus.NewDesc(prometheus.BuildFQName(namespace, "agent", "targets"),
		"Targets watched, by kind.", []string{"kind"}, nil)
	threadsGauge = prometheus.NewDesc(prometheus.BuildFQName(namespace, "agent", "threads"),
		"Threads watched.", nil, nil)
	infoGauge = prometheus.NewDesc(prometheus.BuildFQName(namespace, "agent", "info"),
		"How the BPF programs are attached (tp_btf or raw_tp).", []string{"attach_mode"}, nil)
	tracedTotal = prometheus.NewDesc(prometheus.BuildFQName(namespace, "agent", "traced_seconds_total"),
		"Time the BPF programs were attached (trace windows): what histograms and traced_ counters cover.", nil, nil)
	tracingGauge = prometheus.NewDesc(prometheus.BuildFQName(namespace, "agent", "tracing"),
		"1 while the BPF programs are attached (in a trace window), 0 between windows.", nil, nil)
)

// agentCollector exports the agent's own state.
type agentCollector struct{}

func init() { register("agent", agentCollector{}) }

func (agentCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- dropsTotal
	ch <- targetsGauge
	ch <- threadsGauge
	ch <- infoGauge
	ch <- tracedTotal
	ch <- tracingGauge
}

func (agentCollector) update(s *emitter, snap *model.Snapshot) error {
	s.metric(dropsTotal, prometheus.CounterValue, float64(snap.EventDrops))
	kinds := map[string]int{"domain": 0, "pid": 0, "cgroup": 0}
	threads := 0
	for _, t := range snap.Targets {
		kinds[t.Kind]++
		threads += len(t.Threads)
	}
	for k, n := range kinds {
		s.metric(targetsGauge, prometheus.GaugeValue, float64(n), k)
	}
	s.metric(threadsGauge, prometheus.GaugeValue, float64(threads))
	s.metric(infoGauge, prometheus.GaugeValue, 1, snap.AttachMode)
	s.metric(tracedTotal, prometheus.CounterValue, snap.TracedTotalSeconds)
	tracing := 0.0
	if snap.Tracing {
		tracing = 1
	}
	s.metric(tracingGauge, prometheus.GaugeValue, tracing)
	return nil
}
