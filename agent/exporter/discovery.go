package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-probe/vgpu-probe/agent/discover"
)

// Discovery is what --discover left out, on every agent's /metrics:
//
//   - vgpu_probe_discover_untrusted_processes: processes named like a
//     hypervisor at the last scan that discovery does not trust (not run
//     by a user trusted to run hypervisors, or not a root-owned
//     executable): they get no target, page, slice or series of their
//     own, only this count;
//   - vgpu_probe_discover_limited_total{limit}: each time a bound cut what
//     was discovered (vms: a VM left out of a full host, at each scan it
//     waits; vcpus: a VM's vCPUs beyond the per-VM bound; name: a name
//     cut to the label bound; cmdline: a trusted hypervisor's command
//     line cut to what discovery reads of it).
var Discovery = newDiscoveryMetrics()

// DiscoveryMetrics holds the two; it is a prometheus.Collector.
type DiscoveryMetrics struct {
	untrusted prometheus.Gauge
	limited   *prometheus.CounterVec
}

func newDiscoveryMetrics() *DiscoveryMetrics {
	d := &DiscoveryMetrics{
		untrusted: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "discover", Name: "untrusted_processes",
			Help: "Processes named like a hypervisor at the last scan that are not trusted as VMs (their owner or executable), and so not watched.",
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "discover", Name: "limited_total",
			Help: "Times a discovery bound cut what was found: vms (a VM left out, per scan), vcpus (a VM's vCPUs beyond the bound), name (a name cut), cmdline (a command line cut).",
		}, []string{"limit"}),
	}
	for _, l := range []string{discover.LimitVMs, discover.LimitVCPUs, discover.LimitName, discover.LimitCmdline} {
		d.limited.WithLabelValues(LabelValue(l))
	}
	return d
}

// Untrusted sets the gauge (discover.Options.Untrusted).
func (d *DiscoveryMetrics) Untrusted(n int) { d.untrusted.Set(float64(n)) }

// Limited counts one cut (discover.Options.Limited).
func (d *DiscoveryMetrics) Limited(limit string) { d.limited.WithLabelValues(LabelValue(limit)).Inc() }

func (d *DiscoveryMetrics) Describe(ch chan<- *prometheus.Desc) {
	d.untrusted.Describe(ch)
	d.limited.Describe(ch)
}

func (d *DiscoveryMetrics) Collect(ch chan<- prometheus.Metric) {
	d.untrusted.Collect(ch)
	d.limited.Collect(ch)
}
