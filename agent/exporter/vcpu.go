package exporter

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
)

const namespace = "vgpu_probe"

var vcpuLabels = []string{"domain", "vcpu"}

func vcpuDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "vcpu", name), help, append(append([]string{}, vcpuLabels...), extra...), nil)
}

var (
	// Histograms and the traced_ counters hold what the BPF programs saw
	// in trace windows (vgpu_probe_agent_traced_seconds_total of them);
	// the other counters are the kernel's and miss nothing.
	runHist      = vcpuDesc("run_seconds", "On-CPU intervals of a vCPU (or watched) thread, seen in trace windows.")
	offCPUHist   = vcpuDesc("offcpu_seconds", "Off-CPU intervals (descheduled or asleep) of a vCPU thread, seen in trace windows.")
	sliceHist    = vcpuDesc("slice_seconds", "On-CPU intervals that ended in an involuntary preemption, seen in trace windows: the slice the thread gets under contention.")
	wakeHist     = vcpuDesc("wake_latency_seconds", "Time from wake-up to running, seen in trace windows.")
	waitTotal    = vcpuDesc("runnable_wait_seconds_total", "Time runnable but not running (host-side steal).")
	preemptTotal = vcpuDesc("preemptions_total", "Switch-outs while still runnable (involuntary).")
	switchTotal  = vcpuDesc("switches_total", "Switch-ins.")
	wakeTotal    = vcpuDesc("wakeups_total", "Voluntary switch-outs (sleeps), each ended by a wake-up.")
	throtTotal   = vcpuDesc("traced_throttles_total", "Switch-outs because the CPU bandwidth quota ran out, seen in trace windows.")
	stealRatio   = vcpuDesc("steal_ratio", "Share of wall time spent runnable but not running, over the agent's window.")
	expSlice     = vcpuDesc("expected_slice_seconds", "Expected run length once on CPU (+Inf when nothing competes for its CPUs).")
	remSlice     = vcpuDesc("remaining_slice_seconds", "Estimated time left before the thread loses its CPU (+Inf when nothing competes; the whole expected slice between trace windows).")
	corunWait    = vcpuDesc("traced_corunner_wait_seconds_total", "Runnable wait that followed a preemption, by the command that took the CPU, seen in trace windows (top 5 per vCPU; swapper = throttled).", "corunner")
)

// vcpuCollector exports per-thread discontinuity.
type vcpuCollector struct{}

func init() { register("vcpu", vcpuCollector{}) }

func (vcpuCollector) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runHist, offCPUHist, sliceHist, wakeHist, waitTotal, preemptTotal, switchTotal, wakeTotal, throtTotal, stealRatio, expSlice, remSlice, corunWait} {
		ch <- d
	}
}

// Exported histogram buckets: powers of two from 2^10 ns (~1 µs) to 2^31
// ns (~2.1 s), each a boundary of the BPF log-linear buckets, so the
// export is exact, not interpolated.
const minExp, maxExp = 10, 31

func (vcpuCollector) update(ch chan<- prometheus.Metric, snap *model.Snapshot) error {
	for _, tg := range snap.Targets {
		used := map[string]bool{}
		for _, th := range tg.Threads {
			c := th.Cumulative
			if c == nil {
				continue
			}
			lv := []string{tg.Name, vcpuLabel(th, used)}
			tr := &c.Traced
			ch <- histogram(runHist, &tr.Run, float64(tr.RunNs)/1e9, lv)
			ch <- histogram(offCPUHist, &tr.OffCPU, float64(tr.OffCPUNs)/1e9, lv)
			ch <- histogram(sliceHist, &tr.Slice, math.NaN(), lv)
			ch <- histogram(wakeHist, &tr.Wake, math.NaN(), lv)
			ch <- prometheus.MustNewConstMetric(waitTotal, prometheus.CounterValue, th.RunnableWaitSeconds, lv...)
			ch <- prometheus.MustNewConstMetric(preemptTotal, prometheus.CounterValue, float64(th.Preemptions), lv...)
			ch <- prometheus.MustNewConstMetric(switchTotal, prometheus.CounterValue, float64(th.Switches), lv...)
			ch <- prometheus.MustNewConstMetric(wakeTotal, prometheus.CounterValue, float64(th.Wakeups), lv...)
			ch <- prometheus.MustNewConstMetric(throtTotal, prometheus.CounterValue, float64(th.Throttles), lv...)
			ch <- prometheus.MustNewConstMetric(stealRatio, prometheus.GaugeValue, th.StealFraction, lv...)
			ch <- prometheus.MustNewConstMetric(expSlice, prometheus.GaugeValue, usOrInf(th.ExpectedSliceUS), lv...)
			ch <- prometheus.MustNewConstMetric(remSlice, prometheus.GaugeValue, usOrInf(th.RemainingSliceUS), lv...)
			seen := map[string]bool{}
			for _, co := range th.Corunners {
				if seen[co.Comm] {
					continue // two processes with one name: keep the bigger
				}
				seen[co.Comm] = true
				ch <- prometheus.MustNewConstMetric(corunWait, prometheus.CounterValue, co.WaitedSeconds, append(lv, co.Comm)...)
			}
		}
	}
	return nil
}

// vcpuLabel is the vCPU index, or "tid:N" for a thread that is not a vCPU
// or whose index another thread of the target already has (label sets
// must be unique).
func vcpuLabel(th model.Thread, used map[string]bool) string {
	l := "tid:" + strconv.Itoa(th.TID)
	if th.VCPU >= 0 {
		if v := strconv.Itoa(th.VCPU); !used[v] {
			l = v
		}
	}
	used[l] = true
	return l
}

// histogram converts a BPF histogram to a Prometheus one. sum in seconds;
// NaN means "not tracked exactly": it is estimated from bucket midpoints.
func histogram(d *prometheus.Desc, h *model.Hist, sum float64, lv []string) prometheus.Metric {
	buckets := make(map[float64]uint64, maxExp-minExp+1)
	for e := minExp; e <= maxExp; e++ {
		buckets[math.Ldexp(1, e)/1e9] = h.CumulativeBelow(e)
	}
	if math.IsNaN(sum) {
		sum = 0
		for i, c := range h {
			if c == 0 {
				continue
			}
			lo, hi := model.BucketBounds(i)
			if math.IsInf(hi, 1) {
				hi = lo
			}
			sum += float64(c) * (lo + hi) / 2 / 1e9
		}
	}
	return prometheus.MustNewConstHistogram(d, h.Count(), sum, buckets, lv...)
}

func usOrInf(p *float64) float64 {
	if p == nil {
		return math.Inf(1)
	}
	return *p / 1e6
}
