package exporter

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

// labelSnapshot is what a host with hostile names gives the exporter: a
// VM named name, co-runners in cgroup (and the same path with one more
// invalid byte, which turns into the same label value), a process
// named comm, and a --pid target named cgroup as a second name source.
func labelSnapshot(name, cgroup, comm string) model.Snapshot {
	th := analyzed(100, 0, 50)
	th.Corunners = []model.Corunner{{TGID: 7, Comm: comm, Key: cgroup, Preemptions: 3, WaitedSeconds: 0.5}}
	vm := model.Target{Name: name, Kind: "domain", Threads: []model.Thread{th, analyzed(101, -1, 0)},
		Corunners: []model.CorunnerWait{
			{Key: cgroup, Preemptions: 3, WaitedSeconds: 0.5},
			{Key: cgroup + "\xfe", Preemptions: 1, WaitedSeconds: 0.25},
			{Key: comm, Preemptions: 1, WaitedSeconds: 0.125},
		}}
	pid := model.Target{Name: cgroup, Kind: "pid", Threads: []model.Thread{analyzed(200, -1, 5)}}
	return model.Snapshot{AttachMode: "tp_btf", Targets: []model.Target{vm, pid}}
}

// serve answers one request of the agent's handler over snap.
func serve(t *testing.T, snap model.Snapshot, path string) *httptest.ResponseRecorder {
	t.Helper()
	h, err := NewHandler(fixed{snap: snap}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

// checkExposition: /metrics answers 200 with an exposition that parses,
// every label value in it valid UTF-8 and bounded, and the VM's series
// and its co-runner's there under their label values; the snapshot API
// answers 200 with valid JSON.
func checkExposition(t *testing.T, name, cgroup, comm string) {
	snap := labelSnapshot(name, cgroup, comm)
	rec := serve(t, snap, "/metrics")
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d, want 200: %.2000s", rec.Code, rec.Body.String())
	}
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	for fname, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := l.GetValue(); !utf8.ValidString(v) || len(v) > MaxLabelValueBytes {
					t.Fatalf("%s: label %s=%q: not valid UTF-8 or over %d bytes", fname, l.GetName(), v, MaxLabelValueBytes)
				}
			}
		}
	}
	if !hasSeries(fams, "vgpu_probe_target_info", map[string]string{"domain": LabelValue(name), "kind": "domain"}) {
		t.Errorf("no target_info for domain %q", LabelValue(name))
	}
	if !hasSeries(fams, "vgpu_probe_vcpu_traced_corunner_wait_seconds_total", map[string]string{"domain": LabelValue(name), "corunner": LabelValue(cgroup)}) {
		t.Errorf("no co-runner %q of domain %q", LabelValue(cgroup), LabelValue(name))
	}
	rec = serve(t, snap, "/api/v1/snapshot")
	var got struct{ Targets []struct{ Name string } }
	if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != http.StatusOK || err != nil {
		t.Fatalf("/api/v1/snapshot: %d, %v: %.2000s", rec.Code, err, rec.Body.String())
	}
	// Where it is not cut, a label shows a name as the snapshot does.
	if len(got.Targets) == 0 || (len(name) <= MaxLabelValueBytes/3 && got.Targets[0].Name != LabelValue(name)) {
		t.Errorf("snapshot targets %q, label %q", got.Targets, LabelValue(name))
	}
}

// hasSeries reports whether family fam has a series with the labels want
// (and maybe others).
func hasSeries(fams map[string]*dto.MetricFamily, fam string, want map[string]string) bool {
	f := fams[fam]
	if f == nil {
		return false
	}
	for _, m := range f.GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		if n == len(want) {
			return true
		}
	}
	return false
}

// FuzzLabelValues: whatever bytes a VM name, a co-runner's cgroup path or
// a process name hold, a scrape answers 200 with an exposition that
// parses, and the JSON snapshot stays JSON. One bad value used to fail
// every scrape (HTTP 500 for every VM).
func FuzzLabelValues(f *testing.F) {
	// More in testdata/fuzz/FuzzLabelValues: names not UTF-8, over the
	// bound, with the bytes the text format escapes.
	f.Add("vm1", "/system.slice/stress.service", "stress")
	f.Fuzz(checkExposition)
}

// TestLabelValue: valid, bounded values pass unchanged; each byte that is
// not part of valid UTF-8 becomes U+FFFD, as in the JSON snapshot; a long
// value is cut at a character boundary.
func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", MaxLabelValueBytes-1) + "é"
	for _, c := range []struct{ in, want string }{
		{"vm1", "vm1"},
		{"bad\xff\xfename", "bad\uFFFD\uFFFDname"},
		{"/a/\xc0b\xff", "/a/\uFFFDb\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate half
		{strings.Repeat("x", MaxLabelValueBytes), strings.Repeat("x", MaxLabelValueBytes)},
		{strings.Repeat("x", MaxLabelValueBytes+1), strings.Repeat("x", MaxLabelValueBytes)},
		{long, long[:MaxLabelValueBytes-1]},
		{strings.Repeat("\xff", MaxLabelValueBytes), strings.Repeat("\uFFFD", MaxLabelValueBytes/3)},
	} {
		if got := LabelValue(c.in); got != c.want {
			t.Errorf("LabelValue(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestOneWayToMakeMetrics: no file of the package makes a metric but
// through the emitter, nor picks a vector's series but through
// LabelValue, so that no label value reaches the client library without
// it.
func TestOneWayToMakeMetrics(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	makers := regexp.MustCompile(`prometheus\.(Must)?NewConst\w*\(|WithLabelValues\([^L)]|\.With\(`)
	for _, f := range files {
		if f == "labels.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := makers.Find(b); m != nil {
			t.Errorf("%s: %s: a metric made outside the emitter (labels.go), or a vector's label value not through LabelValue", f, m)
		}
	}
}

// TestLabelCollisions: co-runner keys that become one label value are
// one series, their waits summed; a target whose name becomes another's
// label value keeps what its kind sets apart (target_info) and loses the
// series it would repeat, which shows as collector_success 0, while the
// scrape answers 200.
func TestLabelCollisions(t *testing.T) {
	vm := model.Target{Name: "vm\xff", Kind: "domain", Threads: []model.Thread{analyzed(100, -1, 0)},
		Corunners: []model.CorunnerWait{{Key: "/x\xff", Preemptions: 1, WaitedSeconds: 0.5}, {Key: "/x\xfe", Preemptions: 2, WaitedSeconds: 0.25}}}
	pid := model.Target{Name: "vm\xfe", Kind: "pid", Threads: []model.Thread{analyzed(200, -1, 0)}}
	rec := serve(t, model.Snapshot{Targets: []model.Target{vm, pid}}, "/metrics")
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d: %.2000s", rec.Code, rec.Body.String())
	}
	body := rec.Body.String()
	for _, want := range []string{
		`vgpu_probe_vcpu_traced_corunner_wait_seconds_total{corunner="/x` + "\uFFFD" + `",domain="vm` + "\uFFFD" + `"} 0.75`,
		`vgpu_probe_target_info{domain="vm` + "\uFFFD" + `",kind="domain"} 1`,
		`vgpu_probe_target_info{domain="vm` + "\uFFFD" + `",kind="pid"} 1`,
		`vgpu_probe_scrape_collector_success{collector="vcpu"} 0`,
		`vgpu_probe_scrape_collector_success{collector="agent"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if n := strings.Count(body, "vgpu_probe_vcpu_run_seconds_total{"); n != 1 {
		t.Errorf("%d run_seconds_total series, want the first target's one", n)
	}
}

// rawNamed is fixed with its one timeline under a name that is not UTF-8.
type rawNamed struct{ fixed }

func (r rawNamed) TimelinePage(name string, last time.Duration, cur monitor.TimelineCursor, limit int) (monitor.TimelinePage, error) {
	if name == "vm\xff" {
		name = "vm1"
	} else {
		name = "not " + name
	}
	return r.fixed.TimelinePage(name, last, cur, limit)
}

// TestTimelineByLabel: the timeline of a target whose name is not UTF-8
// is found by its label value (the name in the snapshot too).
func TestTimelineByLabel(t *testing.T) {
	src := rawNamed{fixed{snap: model.Snapshot{Targets: []model.Target{{Name: "vm\xff", Kind: "domain"}}}, events: 1}}
	srv := httptest.NewServer(handlerOf(t, src))
	defer srv.Close()
	body := get(t, srv.URL+"/api/v1/timeline?domain="+url.QueryEscape(LabelValue("vm\xff")), 200)
	if !strings.Contains(body, `"tid":0,`) {
		t.Errorf("timeline lacks the event: %s", body)
	}
	get(t, srv.URL+"/api/v1/timeline?domain="+url.QueryEscape("vm\uFFFD\uFFFD"), 404)
	get(t, srv.URL+"/api/v1/timeline?domain=vm1", 404)
}
