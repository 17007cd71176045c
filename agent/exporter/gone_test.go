package exporter

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
)

// Gone targets and threads are in /api/v1/snapshot for a while after they
// went, but their series end when they go: /metrics is as if they were
// not there.
func TestGoneLeftOutOfMetrics(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	with := testSnapshot()
	with.Targets[0].Threads = append(with.Targets[0].Threads,
		model.Thread{TID: 15, VCPU: 1, Preemptions: 9, Gone: true, GoneAt: at})
	with.Targets = append(with.Targets, model.Target{Name: "vm2", Kind: "domain", Gone: true, GoneAt: at,
		Threads: []model.Thread{{TID: 21, VCPU: 0, Preemptions: 4, Gone: true, GoneAt: at}}})

	metrics := func(s model.Snapshot) string {
		srv := httptest.NewServer(handlerOf(t, fixed{snap: s}))
		defer srv.Close()
		var keep []string
		for line := range strings.Lines(get(t, srv.URL+"/metrics", 200)) {
			if strings.HasPrefix(line, "vgpu_probe_") && !strings.HasPrefix(line, "vgpu_probe_scrape_collector_duration") {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "")
	}
	got, want := metrics(with), metrics(testSnapshot())
	if got != want {
		t.Errorf("metrics with gone targets and threads differ:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(got, "vm2") || strings.Contains(got, `vcpu="1"`) {
		t.Error("a gone target or thread has series")
	}

	srv := httptest.NewServer(handlerOf(t, fixed{snap: with}))
	defer srv.Close()
	var snap model.Snapshot
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/api/v1/snapshot", 200)), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Targets) != 2 || len(snap.Targets[0].Threads) != 5 || !snap.Targets[0].Threads[4].Gone {
		t.Fatalf("/api/v1/snapshot lacks the gone thread: %+v", snap.Targets)
	}
	if g := snap.Targets[1]; g.Name != "vm2" || !g.Gone || !g.GoneAt.Equal(at) {
		t.Fatalf("/api/v1/snapshot: gone target %+v, want vm2 gone at %v", g, at)
	}
}
