package promsource

import (
	"math"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
)

// Every query the report runs is here, so that a renamed metric is one
// edit. $sel becomes the --match matchers and $range the --range; each
// query aggregates over the whole fleet at once, grouped by the labels
// below, so the number of requests does not grow with the hosts.

// The labels the agent's series carry (agent/exporter) and Prometheus
// adds (instance).
const (
	instanceLabel = "instance"
	targetLabel   = "domain"
	vcpuLabel     = "vcpu"
	corunnerLabel = "corunner"
	kindLabel     = "kind"
	// selfCorunner is a target's own process taking turns with itself:
	// not interference.
	selfCorunner = "(self)"
	// noVCPU is the vcpu label of a --pid or --cgroup target's threads,
	// summed.
	noVCPU = "none"
)

// baseMetric defines the set of threads: one that every watched thread
// has from its first scrape, so that "no series" means no agent.
const baseMetric = "vgpu_probe_vcpu_runnable_wait_seconds_total"

// A fieldQuery's values fill one field of agentapi.Thread: each thread's
// own (threadQueries), or a target's, copied to each of its threads
// (targetQueries).
type fieldQuery struct {
	expr string
	set  func(th *agentapi.Thread, v float64)
}

// perThread aggregates f(metric{$sel}[$range]) to one value per thread.
func perThread(f, metric string) string {
	return "sum by (instance, domain, vcpu) (" + f + "(" + metric + "{$sel}[$range]))"
}

var threadQueries = []fieldQuery{
	{perThread("rate", baseMetric), func(th *agentapi.Thread, v float64) { th.StealFraction = v }},
	{perThread("increase", baseMetric), func(th *agentapi.Thread, v float64) { th.RunnableWaitSeconds = v }},
	{perThread("increase", "vgpu_probe_vcpu_run_seconds_total"), func(th *agentapi.Thread, v float64) { th.RunSeconds = v }},
	{perThread("rate", "vgpu_probe_vcpu_preemptions_total"), func(th *agentapi.Thread, v float64) { th.PreemptionsPerSecond = v }},
	{perThread("increase", "vgpu_probe_vcpu_preemptions_total"), func(th *agentapi.Thread, v float64) { th.Preemptions = count(v) }},
	{perThread("increase", "vgpu_probe_vcpu_traced_throttles_total"), func(th *agentapi.Thread, v float64) { th.Throttles = count(v) }},
	{"max by (instance, domain, vcpu) (max_over_time(vgpu_probe_vcpu_contended{$sel}[$range]))", func(th *agentapi.Thread, v float64) { th.Contended = v > 0 }},
}

// ageQuery is how long each thread's base series has existed within
// $range, in seconds: now less its first sample's time, found to within
// $step. rate() over a range longer than a series' life divides what it
// saw by the whole range: an agent 70 s old read over 1h looked 50 times
// quieter than it was. The rates are rescaled to the series' age.
const ageQuery = "time() - min by (instance, domain, vcpu) (min_over_time(timestamp(" + baseMetric + "{$sel})[$range:$step]))"

// quantile is the q-quantile in µs of a per-target histogram over
// $range. The buckets are powers of two, so it is interpolated within a
// factor of two.
func quantile(q, histogram string) string {
	return "1e6 * histogram_quantile(" + q + ", sum by (instance, domain, le) (increase(" + histogram + "_bucket{$sel}[$range])))"
}

// targetQueries: the distributions are exported per target, not per
// vCPU.
var targetQueries = []fieldQuery{
	{quantile("0.5", "vgpu_probe_vcpu_offcpu_seconds"), func(th *agentapi.Thread, v float64) { th.OffCPUP50US = v }},
	{quantile("0.99", "vgpu_probe_vcpu_offcpu_seconds"), func(th *agentapi.Thread, v float64) { th.OffCPUP99US = v }},
	{quantile("0.5", "vgpu_probe_vcpu_wake_latency_seconds"), func(th *agentapi.Thread, v float64) { th.WakeP50US = v }},
	{quantile("0.99", "vgpu_probe_vcpu_wake_latency_seconds"), func(th *agentapi.Thread, v float64) { th.WakeP99US = v }},
	{quantile("0.5", "vgpu_probe_vcpu_slice_seconds"), func(th *agentapi.Thread, v float64) { th.SliceP50US = v }},
}

// targetMeta is what a target is: the series say it apart from its
// threads.
type targetMeta struct {
	kind              string
	quotaUS, periodUS int64
}

// A metaQuery fills one field of every target's meta.
type metaQuery struct {
	expr string
	set  func(m *targetMeta, labels func(string) string, v float64)
}

// lastOf is a target gauge's last value in $range.
func lastOf(gauge string) string {
	return "max by (instance, domain) (last_over_time(" + gauge + "{$sel}[$range]))"
}

var metaQueries = []metaQuery{
	{"max by (instance, domain, kind) (last_over_time(vgpu_probe_target_info{$sel}[$range]))",
		func(m *targetMeta, l func(string) string, _ float64) { m.kind = l(kindLabel) }},
	// Present only while a quota is set.
	{lastOf("vgpu_probe_target_quota_seconds"), func(m *targetMeta, _ func(string) string, v float64) { m.quotaUS = int64(math.Round(v * 1e6)) }},
	{lastOf("vgpu_probe_target_period_seconds"), func(m *targetMeta, _ func(string) string, v float64) { m.periodUS = int64(math.Round(v * 1e6)) }},
}

// corunnerQuery is the runnable wait each target's threads spent behind
// each co-runner over $range.
const corunnerQuery = "sum by (instance, domain, corunner) (increase(vgpu_probe_vcpu_traced_corunner_wait_seconds_total{$sel}[$range]))"

// expand puts the matchers, the range and the age query's resolution
// into a query.
func expand(expr string, sel Selector, rng, step string) string {
	return strings.NewReplacer("$sel", sel.inner(), "$range", rng, "$step", step).Replace(expr)
}

func count(v float64) uint64 { return uint64(math.Round(max(0, v))) }
