package promsource

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/profiler/promsource/promtest"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
)

// series is one sample a fake Prometheus answers.
type series struct {
	labels map[string]string
	value  float64
}

func th(inst, dom, vcpu string, v float64) series {
	return series{map[string]string{"instance": inst, "domain": dom, "vcpu": vcpu}, v}
}

func tg(inst, dom string, v float64) series {
	return series{map[string]string{"instance": inst, "domain": dom}, v}
}

func co(inst, dom, who string, v float64) series {
	return series{map[string]string{"instance": inst, "domain": dom, "corunner": who}, v}
}

// fleet is what the fake answers, by the start of the query: two hosts,
// a VM with two vCPUs and a quiet one on the first, a pid target (its
// threads summed under vcpu="none") on the second; range 1m. vm2 and the
// pid target are 30 s old: rate() over 1m halved what they saw.
var fleet = map[string][]series{
	perThread("rate", baseMetric): {th("a:9477", "vm1", "0", 0.30), th("a:9477", "vm1", "1", 0.10),
		th("a:9477", "vm2", "0", 0.02), th("b:9477", "4242", "none", 0.6)},
	perThread("increase", baseMetric): {th("a:9477", "vm1", "0", 18), th("a:9477", "vm1", "1", 6),
		th("a:9477", "vm2", "0", 1.2), th("b:9477", "4242", "none", 36)},
	perThread("increase", "vgpu_probe_vcpu_run_seconds_total"): {th("a:9477", "vm1", "0", 40), th("a:9477", "vm1", "1", 50),
		th("a:9477", "vm2", "0", 10), th("b:9477", "4242", "none", 60)},
	perThread("rate", "vgpu_probe_vcpu_preemptions_total"): {th("a:9477", "vm1", "0", 100), th("a:9477", "vm1", "1", 50),
		// A thread gone before the range: no base series, so not a thread.
		th("a:9477", "vm1", "7", 9)},
	quantile("0.5", "vgpu_probe_vcpu_offcpu_seconds"): {tg("a:9477", "vm1", 500), tg("a:9477", "vm2", nan())},
	corunnerQuery: {co("a:9477", "vm1", "vm2", 5), co("a:9477", "vm1", "(self)", 9), co("a:9477", "vm2", "/system.slice/x", 0)},
	metaQueries[0].expr: {{map[string]string{"instance": "a:9477", "domain": "vm1", "kind": "domain"}, 1},
		{map[string]string{"instance": "b:9477", "domain": "4242", "kind": "pid"}, 1}},
	lastOf("vgpu_probe_target_quota_seconds"):  {tg("a:9477", "vm1", 0.05)},
	lastOf("vgpu_probe_target_period_seconds"): {tg("a:9477", "vm1", 0.1)},
	ageQuery: {th("a:9477", "vm1", "0", 61), th("a:9477", "vm1", "1", 60), th("a:9477", "vm2", "0", 30), th("b:9477", "4242", "none", 30)},
}

func nan() float64 { return math.NaN() }

// fakeProm answers /api/v1/query from answers (by the query with the
// selector and range taken out) and records the queries it got.
type fakeProm struct {
	answers map[string][]series
	mu      sync.Mutex
	queries []string
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	q := r.FormValue("query")
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	var result []map[string]any
	for expr, ss := range f.answers {
		if expand(expr, testSel, "1m", "1s") != q {
			continue
		}
		for _, s := range ss {
			result = append(result, map[string]any{"metric": s.labels, "value": []any{1.7e9, fmt.Sprint(s.value)}})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"status": "success",
		"data": map[string]any{"resultType": "vector", "result": append([]map[string]any{}, result...)}})
}

var testSel, _ = ParseSelector(`{job="gpu"}`)

func load(t *testing.T, url string, timeout time.Duration) ([]report.AgentInput, error) {
	t.Helper()
	return Load(context.Background(), Options{URL: url, Range: time.Minute, Match: testSel, Timeout: timeout,
		Now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)})
}

func TestLoadRebuildsTheFleet(t *testing.T) {
	f := &fakeProm{answers: fleet}
	srv := httptest.NewServer(f)
	defer srv.Close()
	in, err := load(t, srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// One request per query, whatever the number of hosts.
	if len(f.queries) != len(allQueries()) {
		t.Errorf("%d requests, want %d", len(f.queries), len(allQueries()))
	}
	if len(in) != 2 || in[0].URL != "a:9477" || in[1].URL != "b:9477" {
		t.Fatalf("hosts: %+v", in)
	}
	a := in[0].Snapshot
	if a.WindowSeconds != 60 || len(a.Targets) != 2 || a.Targets[0].Name != "vm1" || a.Targets[0].Kind != "domain" {
		t.Fatalf("host a: %+v", a)
	}
	vm1 := a.Targets[0]
	if vm1.QuotaUS != 50000 || vm1.PeriodUS != 100000 || a.Targets[1].QuotaUS != 0 {
		t.Errorf("quota: %+v", a.Targets)
	}
	if len(vm1.Threads) != 2 || vm1.Threads[0].VCPU != 0 || vm1.Threads[1].VCPU != 1 {
		t.Fatalf("vm1 threads: %+v", vm1.Threads)
	}
	if th := vm1.Threads[0]; th.StealFraction != 0.30 || th.RunSeconds != 40 || th.PreemptionsPerSecond != 100 || th.OffCPUP50US != 500 {
		t.Errorf("vm1 vcpu0: %+v", th)
	}
	// vm2's series is 30 s old: its rate over 1m is doubled back, not
	// read diluted.
	if th := a.Targets[1].Threads[0]; !near(th.StealFraction, 0.04) {
		t.Errorf("vm2, 30 s old: waited %v, want 0.04 (0.02 over 1m rescaled to its 30 s)", th.StealFraction)
	}
	if cs := vm1.Threads[0].Corunners; len(cs) != 1 || cs[0].Comm != "vm2" || cs[0].WaitedSeconds != 5 {
		t.Errorf("vm1 co-runners (its own threads and zero waits left out): %+v", cs)
	}
	if th := a.Targets[1].Threads[0]; th.OffCPUP50US != 0 {
		t.Errorf("empty histogram (NaN) gave %v, want 0", th.OffCPUP50US)
	}
	b := in[1].Snapshot.Targets[0]
	// 36 s of wait in its 30 s of life (1.2 s/s) shared by 3.2 busy
	// threads (96 s of run and wait over 30 s).
	if b.Kind != "pid" || len(b.Threads) != 1 || b.Threads[0].VCPU != -1 || !near(b.Threads[0].StealFraction, 0.375) {
		t.Errorf("pid target: %+v", b)
	}
	if w := in[1].Snapshot.WindowSeconds; w != 30 {
		t.Errorf("host b's window: %v s, want its series' age, 30", w)
	}

	r, err := report.Build(report.Inputs{Agents: in})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, vm := range r.VMs {
		order = append(order, vm.Source+"/"+vm.Name)
	}
	if strings.Join(order, " ") != "b:9477/4242 a:9477/vm1 a:9477/vm2" {
		t.Errorf("ranking %v", order)
	}
	if r.VMs[1].TopCorunner != "vm2" || r.VMs[2].Recommendation.Action != report.ActionNothing {
		t.Errorf("vm1 %+v, vm2 %+v", r.VMs[1], r.VMs[2])
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// Each way a server can fail the report gives one line naming it.
func TestLoadBadServers(t *testing.T) {
	fail := promtest.Start(t)
	serve := func(h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	rejects := serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"1:30: parse error: unexpected character"}`))
	})
	notProm := serve(http.NotFound)
	for _, tc := range []struct{ name, url, want string }{
		{"down", fail.Down, "cannot reach it: dial tcp"},
		{"garbage", fail.Garbage, "not a Prometheus query API answer"},
		{"timeout", fail.Slow, "no answer within 200ms (--timeout)"},
		{"no series", fail.Empty, `no vgpu-probe series (vgpu_probe_vcpu_runnable_wait_seconds_total{job="gpu"}) in the last 1m`},
		{"rejected", rejects, "bad_data: 1:30: parse error"},
		{"not prometheus", notProm, "is this the server's base URL?"},
		{"bad url", "prometheus:9090", "want http://HOST:PORT"},
	} {
		in, err := load(t, tc.url, 200*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", tc.name, err, tc.want)
		}
		if in != nil {
			t.Errorf("%s: partial input %+v", tc.name, in)
		}
	}
}

func TestWindowNotes(t *testing.T) {
	snap := func(w float64) *agentapi.Snapshot { return &agentapi.Snapshot{WindowSeconds: w} }
	got := WindowNotes([]report.AgentInput{{URL: "a:9477", Snapshot: snap(3600)}, {URL: "b:9477", Snapshot: snap(70)},
		{URL: "c:9477", Snapshot: snap(3600)}}, time.Hour)
	want := []string{"prometheus: rates over the last 1h (--range): a:9477, c:9477",
		"prometheus: rates over the last 1m10s, the age of the oldest series (younger than --range 1h; each series' rates cover its own life): b:9477"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
