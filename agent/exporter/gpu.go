package exporter

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-probe/vgpu-probe/nvml"
)

// GPUSampler reads the host's GPUs (*nvml.Sampler).
type GPUSampler interface {
	Devices() []nvml.Device
	Sample(now time.Time) ([]nvml.Sample, error)
}

var _ GPUSampler = (*nvml.Sampler)(nil)

var (
	gpuLabels  = []string{"gpu", "name"}
	gpuUtil    = gpuDesc("utilization_ratio", "Share of the last sample period in which a kernel ran on the GPU.")
	gpuMemUtil = gpuDesc("memory_utilization_ratio", "Share of the last sample period in which GPU memory was read or written.")
	gpuSMClock = gpuDesc("sm_clock_hertz", "Current SM clock.")
	gpuMemUsed = gpuDesc("memory_used_bytes", "GPU memory in use.")
	gpuMemTot  = gpuDesc("memory_total_bytes", "GPU memory installed.")
	gpuProc    = prometheus.NewDesc(prometheus.BuildFQName(namespace, "gpu", "process_sm_utilization_ratio"),
		"A process's share of the GPU's SM time in the last sample period.", append(append([]string{}, gpuLabels...), "pid"), nil)
)

func gpuDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "gpu", name), help, gpuLabels, nil)
}

// GPUCollector exports NVML readings, one sample per scrape: the
// utilisation an operator sets beside the vCPU discontinuity to see a GPU
// VM starved by CPU sharing (the paper's vGPU under-utilisation).
type GPUCollector struct {
	s     GPUSampler
	names map[int]string
}

var _ prometheus.Collector = (*GPUCollector)(nil)

// NewGPUCollector returns a collector over s.
func NewGPUCollector(s GPUSampler) *GPUCollector {
	names := map[int]string{}
	for _, d := range s.Devices() {
		names[d.Index] = d.Name
	}
	return &GPUCollector{s: s, names: names}
}

// Describe implements prometheus.Collector.
func (c *GPUCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gpuUtil, gpuMemUtil, gpuSMClock, gpuMemUsed, gpuMemTot, gpuProc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A failed reading shows as
// vgpu_probe_scrape_collector_success{collector="gpu"} 0.
func (c *GPUCollector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	out := newEmitter(ch)
	smp, err := c.s.Sample(start)
	for _, s := range smp {
		lv := []string{strconv.Itoa(s.GPU), c.names[s.GPU]}
		gauge := func(d *prometheus.Desc, v float64) { out.metric(d, prometheus.GaugeValue, v, lv...) }
		gauge(gpuUtil, float64(s.UtilPct)/100)
		gauge(gpuMemUtil, float64(s.MemUtilPct)/100)
		gauge(gpuSMClock, float64(s.SMClockMHz)*1e6)
		gauge(gpuMemUsed, float64(s.MemUsedBytes))
		gauge(gpuMemTot, float64(s.MemTotalBytes))
		for _, p := range s.Processes {
			out.metric(gpuProc, prometheus.GaugeValue, float64(p.SMPct)/100, append(lv, strconv.FormatUint(uint64(p.PID), 10))...)
		}
	}
	ok := 1.0
	if err != nil || out.take() != nil {
		ok = 0
	}
	out.metric(scrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds(), "gpu")
	out.metric(scrapeSuccess, prometheus.GaugeValue, ok, "gpu")
}

// gpuUnavailable stands for the GPU collector when NVML cannot be
// opened (no GPU, no driver): collector_success{collector="gpu"} 0, so
// that the failure is on the dashboard and alerts, not only in the log
// line the agent wrote when it started.
type gpuUnavailable struct{}

// NewGPUUnavailable returns the collector to serve when --nvml was asked
// for but NVML could not be opened.
func NewGPUUnavailable() prometheus.Collector { return gpuUnavailable{} }

// Describe describes nothing (an unchecked collector): scrapeSuccess is
// the agent collector's, which a registry lets only one describe.
func (gpuUnavailable) Describe(chan<- *prometheus.Desc) {}

func (gpuUnavailable) Collect(ch chan<- prometheus.Metric) {
	newEmitter(ch).metric(scrapeSuccess, prometheus.GaugeValue, 0, "gpu")
}
