package exporter

import (
	"bytes"
	"fmt"
	"math"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

// analyzed runs the model over counters of one thread, so that the
// exporter sees what the monitor would give it: preempted > 0 makes it
// contended.
func analyzed(tid, vcpu int, preempted uint64) model.Thread {
	start := &model.Counters{}
	cur := &model.Counters{}
	cur.Kernel.RunNs, cur.Kernel.RunDelayNs = 6e9, 1e9
	cur.Kernel.Timeslices, cur.Kernel.Involuntary, cur.Kernel.Voluntary = 1000, preempted, 900
	tr := &cur.Traced
	tr.RunNs, tr.OffCPUNs, tr.Preemptions, tr.Switches = 3e9, 5e9, preempted, 1000
	tr.Run[model.Bucket(3e6)] = 1000
	tr.OffCPU[model.Bucket(5e6)] = 1000
	tr.Wake[model.Bucket(20e3)] = 900
	tr.Slice[model.Bucket(4e6)] = preempted
	return model.Analyze(model.Input{TID: tid, VCPU: vcpu, Cur: cur, Start: start, WindowStart: start,
		Watched: 10 * time.Second, Window: 10 * time.Second, NowNs: 1})
}

// fleetSnapshot is one host of a fleet: a 4-vCPU VM under contention with
// every kind of co-runner and a quota, an idle 2-vCPU VM, and a --pid
// target with a vCPU thread and `others` threads that are not vCPUs.
func fleetSnapshot(others int) model.Snapshot {
	vm1 := model.Target{Name: "vm1", Kind: "domain", PeriodUS: 100000, QuotaUS: 50000}
	for v := range 4 {
		vm1.Threads = append(vm1.Threads, analyzed(100+v, v, 50))
	}
	for i := range monitor.MaxCorunnerKeys {
		vm1.Corunners = append(vm1.Corunners, model.CorunnerWait{Key: fmt.Sprintf("/system.slice/job%d.service", i), Preemptions: 3, WaitedSeconds: 0.5})
	}
	vm1.Corunners = append(vm1.Corunners, model.CorunnerWait{Key: "vm2", Preemptions: 1, WaitedSeconds: 0.1},
		model.CorunnerWait{Key: model.CorunnerThrottled, Preemptions: 1, WaitedSeconds: 0.1},
		model.CorunnerWait{Key: model.CorunnerSelf, Preemptions: 1, WaitedSeconds: 0.1},
		model.CorunnerWait{Key: model.CorunnerOther, Preemptions: 1, WaitedSeconds: 0.1})
	vm1.Corunners = vm1.Corunners[1:] // 5 named keys: 4 services and vm2
	vm2 := model.Target{Name: "vm2", Kind: "domain", Threads: []model.Thread{analyzed(200, 0, 0), analyzed(201, 1, 0)}}
	pid := model.Target{Name: "4242", Kind: "pid", Threads: []model.Thread{analyzed(4243, 0, 5)}}
	for i := range others {
		pid.Threads = append(pid.Threads, analyzed(4300+i, -1, uint64(i%2)))
	}
	return model.Snapshot{AttachMode: "tp_btf", Tracing: true, TracedTotalSeconds: 10, Targets: []model.Target{vm1, vm2, pid}}
}

// scrape serves snap through the real handler and returns /metrics.
func scrape(t *testing.T, snap model.Snapshot) string {
	t.Helper()
	h, err := NewHandler(fixed{snap: snap}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	return get(t, srv.URL+"/metrics", 200)
}

// series is one exposed sample: a histogram counts once per bucket, +Inf
// bucket, _sum and _count, as Prometheus stores it.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

func parseSeries(t *testing.T, body string) []series {
	t.Helper()
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	var out []series
	for name, f := range fams {
		for _, m := range f.Metric {
			lv := map[string]string{}
			for _, l := range m.Label {
				lv[l.GetName()] = l.GetValue()
			}
			out = append(out, samplesOf(name, f.GetType(), m, lv)...)
		}
	}
	return out
}

func samplesOf(name string, typ dto.MetricType, m *dto.Metric, lv map[string]string) []series {
	switch typ {
	case dto.MetricType_HISTOGRAM:
		h := m.Histogram
		out := []series{{name + "_sum", lv, h.GetSampleSum()}, {name + "_count", lv, float64(h.GetSampleCount())}}
		inf := false
		for _, b := range h.Bucket {
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
			out = append(out, series{name + "_bucket", withLabel(lv, "le", fmt.Sprint(b.GetUpperBound())), float64(b.GetCumulativeCount())})
		}
		if !inf { // always exposed; a parser may fold it into _count
			out = append(out, series{name + "_bucket", withLabel(lv, "le", "+Inf"), float64(h.GetSampleCount())})
		}
		return out
	case dto.MetricType_COUNTER:
		return []series{{name, lv, m.Counter.GetValue()}}
	case dto.MetricType_GAUGE:
		return []series{{name, lv, m.Gauge.GetValue()}}
	case dto.MetricType_SUMMARY:
		out := []series{{name + "_sum", lv, m.Summary.GetSampleSum()}, {name + "_count", lv, float64(m.Summary.GetSampleCount())}}
		for _, q := range m.Summary.Quantile {
			out = append(out, series{name, withLabel(lv, "quantile", fmt.Sprint(q.GetQuantile())), q.GetValue()})
		}
		return out
	default:
		return []series{{name, lv, m.Untyped.GetValue()}}
	}
}

func withLabel(lv map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range lv {
		out[a] = b
	}
	return out
}

// budget counts the series of a scrape per vCPU, per target, of the agent
// itself and of the Go runtime and process.
type budget struct {
	perVCPU   map[string]int // "domain/vcpu"
	perTarget map[string]int
	agent     int
	runtime   int
	all       []series
}

func countSeries(t *testing.T, body string) budget {
	b := budget{perVCPU: map[string]int{}, perTarget: map[string]int{}, all: parseSeries(t, body)}
	for _, s := range b.all {
		d, hasDomain := s.labels["domain"]
		v, hasVCPU := s.labels["vcpu"]
		switch {
		case hasVCPU:
			b.perVCPU[d+"/"+v]++
		case hasDomain:
			b.perTarget[d]++
		case strings.HasPrefix(s.name, namespace+"_"):
			b.agent++
		default:
			b.runtime++
		}
	}
	return b
}

// Budgets of what is not per target: the agent's own series (errors by
// kind, targets by kind, scrape health per collector) and client_golang's
// Go runtime and process collectors.
const (
	seriesPerAgent   = 24
	seriesForRuntime = 60
)

// TestSeriesBudget counts the series of a real scrape and holds them to
// the documented budget (docs/agent.md "Metrics"): a change that adds a
// series per vCPU or per VM fails here until the budget and its
// documentation say so.
func TestSeriesBudget(t *testing.T) {
	b := countSeries(t, scrape(t, fleetSnapshot(20)))
	for k, n := range b.perVCPU {
		if n > SeriesPerVCPU {
			t.Errorf("vCPU %s has %d series, budget %d", k, n, SeriesPerVCPU)
		}
	}
	for k, n := range b.perTarget {
		if n > SeriesPerTarget {
			t.Errorf("target %s has %d series, budget %d", k, n, SeriesPerTarget)
		}
	}
	// The budget is not slack: a contended vCPU and a VM with a quota and
	// every co-runner key use all of it (an uncontended vCPU two less).
	if n := b.perVCPU["vm1/0"]; n != SeriesPerVCPU {
		t.Errorf("contended vCPU: %d series, budget %d: update the budget", n, SeriesPerVCPU)
	}
	if n := b.perVCPU["vm2/0"]; n != SeriesPerVCPU-2 {
		t.Errorf("uncontended vCPU: %d series, want %d", n, SeriesPerVCPU-2)
	}
	if n := b.perTarget["vm1"]; n != SeriesPerTarget {
		t.Errorf("vm1: %d series, budget %d: update the budget", n, SeriesPerTarget)
	}
	if b.agent > seriesPerAgent {
		t.Errorf("the agent's own series: %d, budget %d", b.agent, seriesPerAgent)
	}
	if b.runtime > seriesForRuntime {
		t.Errorf("Go runtime and process series: %d, budget %d", b.runtime, seriesForRuntime)
	}
	// Non-vCPU threads share one series set per target, however many.
	if len(b.perVCPU) != 4+2+2 {
		t.Errorf("vcpu label values %v, want 4+2 vCPUs and the pid target's 0 and none", keys(b.perVCPU))
	}
	more := countSeries(t, scrape(t, fleetSnapshot(200)))
	if len(more.all) != len(b.all) {
		t.Errorf("200 non-vCPU threads: %d series, 20: %d; want the same", len(more.all), len(b.all))
	}
	t.Logf("series: %d per contended vCPU, %d for vm1, %d agent, %d runtime, %d in all",
		b.perVCPU["vm1/0"], b.perTarget["vm1"], b.agent, b.runtime, len(b.all))
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLabelsBounded: every sample is finite, every label value comes from
// a bounded set.
func TestLabelsBounded(t *testing.T) {
	snap := fleetSnapshot(3)
	domains := map[string]bool{}
	for _, tg := range snap.Targets {
		domains[tg.Name] = true
	}
	vcpu := regexp.MustCompile(`^([0-9]+|` + NoVCPU + `)$`)
	reserved := map[string]bool{model.CorunnerThrottled: true, model.CorunnerSelf: true, model.CorunnerOther: true}
	for _, s := range parseSeries(t, scrape(t, snap)) {
		if math.IsInf(s.value, 0) || math.IsNaN(s.value) {
			t.Errorf("%s%v = %v", s.name, s.labels, s.value)
		}
		if v, ok := s.labels["vcpu"]; ok && !vcpu.MatchString(v) {
			t.Errorf("%s: vcpu=%q", s.name, v)
		}
		if c, ok := s.labels["corunner"]; ok && !domains[c] && !reserved[c] && !strings.HasPrefix(c, "/") {
			t.Errorf("%s: corunner=%q is neither a domain, a cgroup nor reserved", s.name, c)
		}
	}
}

// TestPromtoolCheckMetrics lints a real scrape with Prometheus' own
// checker (installed by .ci/setup-prometheus.sh).
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (.ci/setup-prometheus.sh installs it)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape(t, fleetSnapshot(3)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// TestSleepingProcessSeries: a process that slept through every trace
// window costs at most 20 series, however many threads it has (empty
// histograms are not 25 series each), and gains its buckets once it runs.
func TestSleepingProcessSeries(t *testing.T) {
	sleeping := model.Target{Name: "4242", Kind: "pid"}
	for i := range 30 {
		sleeping.Threads = append(sleeping.Threads, model.Thread{TID: 4242 + i, VCPU: -1, Cumulative: &model.Counters{}})
	}
	b := countSeries(t, scrape(t, model.Snapshot{AttachMode: "tp_btf", Targets: []model.Target{sleeping}}))
	n := b.perTarget["4242"] + b.perVCPU["4242/"+NoVCPU]
	if n != SeriesSleeping || n > 20 {
		t.Errorf("a sleeping process: %d series, want SeriesSleeping = %d, at most 20", n, SeriesSleeping)
	}
	woke := fleetSnapshot(0).Targets[2] // the same kind of target, having run
	b = countSeries(t, scrape(t, model.Snapshot{AttachMode: "tp_btf", Targets: []model.Target{woke}}))
	if got := b.perTarget[woke.Name]; got < 3*seriesPerHistogram {
		t.Errorf("a process that ran: %d per-target series, want its three histograms' %d buckets and more", got, 3*seriesPerHistogram)
	}
}
