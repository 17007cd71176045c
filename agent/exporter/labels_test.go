package exporter

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
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
	if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("/api/v1/snapshot: %d, valid JSON %v: %.2000s", rec.Code, json.Valid(rec.Body.Bytes()), rec.Body.String())
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

// TestLabelValue: valid, bounded values pass unchanged; each run of bytes
// that is not UTF-8 becomes one U+FFFD; a long value is cut at a
// character boundary.
func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", MaxLabelValueBytes-1) + "é"
	for _, c := range []struct{ in, want string }{
		{"vm1", "vm1"},
		{"bad\xff\xfename", "bad\uFFFDname"},
		{"/a/\xc0b\xff", "/a/\uFFFDb\uFFFD"},
		{strings.Repeat("x", MaxLabelValueBytes), strings.Repeat("x", MaxLabelValueBytes)},
		{strings.Repeat("x", MaxLabelValueBytes+1), strings.Repeat("x", MaxLabelValueBytes)},
		{long, long[:MaxLabelValueBytes-1]},
		{strings.Repeat("\xff", 2*MaxLabelValueBytes), "\uFFFD"},
	} {
		if got := LabelValue(c.in); got != c.want {
			t.Errorf("LabelValue(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestOneWayToMakeMetrics: no file of the package makes a metric but
// through the emitter, so that no label value reaches the client library
// without LabelValue.
func TestOneWayToMakeMetrics(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	makers := regexp.MustCompile(`prometheus\.(Must)?NewConst\w*\(`)
	for _, f := range files {
		if f == "labels.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := makers.Find(b); m != nil {
			t.Errorf("%s: %s outside the emitter (labels.go)", f, m)
		}
	}
}
