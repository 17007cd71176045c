package exporter

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

const namespace = "vgpu_probe"

// NoVCPU is the vcpu label of the series that sum the threads of a --pid
// or --cgroup target that are not vCPUs: one series per target, however
// many threads come and go.
const NoVCPU = "none"

func vcpuDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "vcpu", name), help, []string{"domain", "vcpu"}, nil)
}

// targetDesc is a metric per target: the distributions and co-runners,
// which operators read per VM, cost one series set per VM instead of one
// per vCPU.
func targetDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "vcpu", name), help, append([]string{"domain"}, extra...), nil)
}

var (
	// Histograms and the traced_ counters hold what the BPF programs saw
	// in trace windows (vgpu_probe_agent_traced_seconds_total of them);
	// the other counters are the kernel's and miss nothing.
	offCPUHist = targetDesc("offcpu_seconds", "Off-CPU intervals (descheduled or asleep) of a target's threads, seen in trace windows.")
	sliceHist  = targetDesc("slice_seconds", "On-CPU intervals of a target's threads that ended in an involuntary preemption, seen in trace windows: the slice they get under contention.")
	wakeHist   = targetDesc("wake_latency_seconds", "Time from wake-up to running of a target's threads, seen in trace windows.")
	corunWait  = targetDesc("traced_corunner_wait_seconds_total", "Runnable wait of a target's threads that followed a preemption, by who took the CPU (a watched domain's name, else a cgroup path, (throttled) or (other)), seen in trace windows.", "corunner")

	targetInfo = prometheus.NewDesc(prometheus.BuildFQName(namespace, "target", "info"),
		"1 for each watched target, with its kind (domain, pid or cgroup).", []string{"domain", "kind"}, nil)
	targetQuota = prometheus.NewDesc(prometheus.BuildFQName(namespace, "target", "quota_seconds"),
		"CPU bandwidth quota per period of a target; absent when it has none.", []string{"domain"}, nil)
	targetPeriod = prometheus.NewDesc(prometheus.BuildFQName(namespace, "target", "period_seconds"),
		"CPU bandwidth period of a target; absent when it has no quota.", []string{"domain"}, nil)

	runTotal     = vcpuDesc("run_seconds_total", "Time on a CPU.")
	waitTotal    = vcpuDesc("runnable_wait_seconds_total", "Time runnable but not running (host-side steal).")
	preemptTotal = vcpuDesc("preemptions_total", "Switch-outs while still runnable (involuntary).")
	switchTotal  = vcpuDesc("switches_total", "Switch-ins.")
	wakeTotal    = vcpuDesc("wakeups_total", "Voluntary switch-outs (sleeps), each ended by a wake-up.")
	throtTotal   = vcpuDesc("traced_throttles_total", "Switch-outs because the CPU bandwidth quota ran out, seen in trace windows.")
	stealRatio   = vcpuDesc("steal_ratio", "Share of wall time spent runnable but not running, over the agent's window (the mean over the threads of vcpu=\"none\").")
	contended    = vcpuDesc("contended", "1 when something took the CPU from the thread in the agent's window (the slice gauges are then present), else 0.")
	expSlice     = vcpuDesc("expected_slice_seconds", "Expected run length once on CPU; absent while not contended (unbounded).")
	remSlice     = vcpuDesc("remaining_slice_seconds", "Estimated time left before the thread loses its CPU (the whole expected slice between trace windows); absent while not contended.")
)

// vcpuCollector exports per-vCPU discontinuity and per-target
// distributions; SeriesPerVCPU and SeriesPerTarget bound what it costs.
type vcpuCollector struct{}

func init() { register("vcpu", vcpuCollector{}) }

var vcpuDescs = []*prometheus.Desc{targetInfo, targetQuota, targetPeriod, offCPUHist, sliceHist, wakeHist, corunWait,
	runTotal, waitTotal, preemptTotal, switchTotal, wakeTotal, throtTotal, stealRatio, contended, expSlice, remSlice}

func (vcpuCollector) describe(ch chan<- *prometheus.Desc) {
	for _, d := range vcpuDescs {
		ch <- d
	}
}

// Exported histogram buckets: powers of two from 2^10 ns (~1 µs) to 2^31
// ns (~2.1 s), each a boundary of the BPF log-linear buckets, so the
// export is exact, not interpolated.
const minExp, maxExp = 10, 31

// The series budget. A histogram is its finite buckets, +Inf, _sum and
// _count.
const (
	seriesPerHistogram = maxExp - minExp + 1 + 3
	// SeriesPerVCPU: the counters and gauges of one vcpu label value
	// (two fewer while it is not contended).
	SeriesPerVCPU = 10
	// SeriesPerTarget: its info, quota and period, three histograms and
	// the co-runner keys (the named ones, (throttled), (self) and
	// (other)).
	SeriesPerTarget = 3 + 3*seriesPerHistogram + monitor.MaxCorunnerKeys + 3
	// SeriesSleeping: a --pid target that has not run in a trace window
	// (a sleeping process): its info, three empty histograms of 3
	// series, and one uncontended vcpu="none" set.
	SeriesSleeping = 1 + 3*3 + SeriesPerVCPU - 2
)

func (vcpuCollector) update(s *emitter, snap *model.Snapshot) error {
	for i := range snap.Targets {
		tg := &snap.Targets[i]
		s.metric(targetInfo, prometheus.GaugeValue, 1, tg.Name, tg.Kind)
		if tg.QuotaUS > 0 && tg.PeriodUS > 0 {
			s.metric(targetQuota, prometheus.GaugeValue, float64(tg.QuotaUS)/1e6, tg.Name)
			s.metric(targetPeriod, prometheus.GaugeValue, float64(tg.PeriodUS)/1e6, tg.Name)
		}
		var off, slice, wake model.Hist
		var offNs uint64
		watched := false
		for _, th := range tg.Threads {
			if c := th.Cumulative; c != nil {
				watched = true
				addHist(&off, &c.Traced.OffCPU)
				addHist(&slice, &c.Traced.Slice)
				addHist(&wake, &c.Traced.Wake)
				offNs += c.Traced.OffCPUNs
			}
		}
		if watched {
			histogram(s, offCPUHist, &off, float64(offNs)/1e9, tg.Name)
			histogram(s, sliceHist, &slice, math.NaN(), tg.Name)
			histogram(s, wakeHist, &wake, math.NaN(), tg.Name)
		}
		for _, co := range corunnerWaits(tg.Corunners) {
			s.metric(corunWait, prometheus.CounterValue, co.WaitedSeconds, tg.Name, co.Key)
		}
		for _, g := range groupThreads(tg.Threads) {
			g.export(s, tg.Name)
		}
	}
	return nil
}

// corunnerWaits sums the waits whose keys are one label value (cgroup
// paths that differ only in bytes LabelValue replaces, or beyond its
// bound): to a reader of the metrics they are one co-runner, and its
// counter is their sum rather than whichever came first.
func corunnerWaits(cs []model.CorunnerWait) []model.CorunnerWait {
	out := make([]model.CorunnerWait, 0, len(cs))
	at := make(map[string]int, len(cs))
	for _, c := range cs {
		c.Key = LabelValue(c.Key)
		if i, ok := at[c.Key]; ok {
			out[i].Preemptions += c.Preemptions
			out[i].WaitedSeconds += c.WaitedSeconds
			continue
		}
		at[c.Key] = len(out)
		out = append(out, c)
	}
	return out
}

// vcpuGroup is the threads behind one vcpu label value: one vCPU thread
// (two while discovery catches up with a vCPU's new thread), or every
// non-vCPU thread of a target.
type vcpuGroup struct {
	label   string
	threads []model.Thread
}

// groupThreads groups a target's threads by label, in order of first
// appearance.
func groupThreads(ths []model.Thread) []*vcpuGroup {
	var out []*vcpuGroup
	by := map[string]*vcpuGroup{}
	for _, th := range ths {
		l := NoVCPU
		if th.VCPU >= 0 {
			l = strconv.Itoa(th.VCPU)
		}
		g := by[l]
		if g == nil {
			g = &vcpuGroup{label: l}
			by[l] = g
			out = append(out, g)
		}
		g.threads = append(g.threads, th)
	}
	return out
}

// export sums the group's counters; the steal ratio is the threads' mean,
// and the slice gauges are the shortest of the contended threads' (the
// one that loses its CPU first), absent when none is contended.
func (g *vcpuGroup) export(s *emitter, domain string) {
	var run, wait, steal float64
	var pre, sw, wk, thr uint64
	var exp, rem *float64
	for _, th := range g.threads {
		run += th.RunSeconds
		wait += th.RunnableWaitSeconds
		steal += th.StealFraction
		pre += th.Preemptions
		sw += th.Switches
		wk += th.Wakeups
		thr += th.Throttles
		if th.Contended && th.ExpectedSliceUS != nil && th.RemainingSliceUS != nil {
			exp, rem = minPtr(exp, th.ExpectedSliceUS), minPtr(rem, th.RemainingSliceUS)
		}
	}
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64) { s.metric(d, t, v, domain, g.label) }
	metric(runTotal, prometheus.CounterValue, run)
	metric(waitTotal, prometheus.CounterValue, wait)
	metric(preemptTotal, prometheus.CounterValue, float64(pre))
	metric(switchTotal, prometheus.CounterValue, float64(sw))
	metric(wakeTotal, prometheus.CounterValue, float64(wk))
	metric(throtTotal, prometheus.CounterValue, float64(thr))
	metric(stealRatio, prometheus.GaugeValue, steal/float64(len(g.threads)))
	if exp == nil {
		metric(contended, prometheus.GaugeValue, 0)
		return
	}
	metric(contended, prometheus.GaugeValue, 1)
	metric(expSlice, prometheus.GaugeValue, *exp/1e6)
	metric(remSlice, prometheus.GaugeValue, *rem/1e6)
}

func minPtr(a, b *float64) *float64 {
	if a == nil || *b < *a {
		return b
	}
	return a
}

func addHist(dst, src *model.Hist) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// histogram sends a BPF histogram as a Prometheus one. sum in seconds;
// NaN means "not tracked exactly": it is estimated from bucket midpoints.
// An empty one (a target that sleeps through every trace window) is its
// _sum, _count and +Inf bucket only: 3 series, not seriesPerHistogram,
// so that a sleeping process costs at most SeriesSleeping. Its buckets
// appear together with its first sample and stay while it lives.
func histogram(s *emitter, d *prometheus.Desc, h *model.Hist, sum float64, lv ...string) {
	if h.Count() == 0 {
		s.histogram(d, 0, 0, nil, lv...)
		return
	}
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
	s.histogram(d, h.Count(), sum, buckets, lv...)
}
