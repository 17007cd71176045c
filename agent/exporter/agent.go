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
)

// agentCollector exports the agent's own state.
type agentCollector struct{}

func init() { register("agent", agentCollector{}) }

func (agentCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- dropsTotal
	ch <- targetsGauge
	ch <- threadsGauge
	ch <- infoGauge
}

func (agentCollector) update(ch chan<- prometheus.Metric, snap *model.Snapshot) error {
	ch <- prometheus.MustNewConstMetric(dropsTotal, prometheus.CounterValue, float64(snap.EventDrops))
	kinds := map[string]int{"domain": 0, "pid": 0, "cgroup": 0}
	threads := 0
	for _, t := range snap.Targets {
		kinds[t.Kind]++
		threads += len(t.Threads)
	}
	for k, n := range kinds {
		ch <- prometheus.MustNewConstMetric(targetsGauge, prometheus.GaugeValue, float64(n), k)
	}
	ch <- prometheus.MustNewConstMetric(threadsGauge, prometheus.GaugeValue, float64(threads))
	ch <- prometheus.MustNewConstMetric(infoGauge, prometheus.GaugeValue, 1, snap.AttachMode)
	return nil
}
