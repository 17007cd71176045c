package agentapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTimelineIntervals(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "agent-timeline-1871.json"))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := ParseTimeline(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 150 {
		t.Fatalf("%d intervals, want 150", len(evs))
	}
	for i, e := range evs {
		if e.EndNs <= e.StartNs || e.TID != 1871 || e.RunUS < 0 {
			t.Fatalf("interval %d = %+v", i, e)
		}
	}
	// The interval format straight from the agent's docs.
	evs, err = ParseTimeline([]byte(`{"domain": "guest1", "seconds": 2, "events": [
  {"out": "2026-11-21T21:41:01.1203Z", "in": "2026-11-21T21:41:01.1242Z", "in_mono_ns": 1234567890,
   "tid": 26682, "vcpu": 0, "cpu": 1, "run_us": 3880.1, "off_us": 3902.4,
   "preempted": true, "throttled": false, "waited": true, "other_tgid": 26683, "other_comm": "sh", "new_field": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := OffCPU{TID: 26682, VCPU: 0, CPU: 1, StartNs: 1234567890 - 3902400, EndNs: 1234567890, RunUS: 3880.1, Preempted: true, Waited: true, OtherComm: "sh"}
	if len(evs) != 1 || evs[0] != want {
		t.Errorf("got %+v, want %+v", evs, want)
	}
}

// TestParseTimelineSwitches: timelines saved from agents that served one
// entry per switch still load, paired into intervals.
func TestParseTimelineSwitches(t *testing.T) {
	evs, err := ParseTimeline([]byte(`[
		{"kind": "in", "mono_ns": 100, "tid": 7},
		{"kind": "out", "mono_ns": 1000, "tid": 7, "interval_us": 0.9, "preempted": true, "other_comm": "stress"},
		{"kind": "out", "mono_ns": 1500, "tid": 8},
		{"kind": "in", "mono_ns": 4000, "tid": 7, "preempted": true},
		{"kind": "in", "mono_ns": 1400, "tid": 8}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := OffCPU{TID: 7, StartNs: 1000, EndNs: 4000, RunUS: 0.9, Preempted: true, Waited: true, OtherComm: "stress"}
	if len(evs) != 1 || evs[0] != want {
		t.Errorf("got %+v, want %+v (tid 8's in before its out is dropped)", evs, want)
	}
}

func TestParseRejects(t *testing.T) {
	for _, b := range []string{`{"events": 3}`, `{"domain": "x"}`, `nope`, `{"events": [`} {
		if _, err := ParseTimeline([]byte(b)); err == nil {
			t.Errorf("timeline %s accepted", b)
		}
	}
	for _, b := range []string{`[]`, `{"time": "2026-01-01T00:00:00Z"}`, `{"targets": [`, `{"targets": 5}`} {
		if _, err := ParseSnapshot([]byte(b)); err == nil {
			t.Errorf("snapshot %s accepted", b)
		}
	}
}

func TestClient(t *testing.T) {
	snap, _ := os.ReadFile(filepath.Join("..", "testdata", "agent-snapshot.json"))
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/prefix/api/v1/snapshot":
			w.Write(snap)
		case "/prefix/api/v1/timeline":
			asked = r.URL.RawQuery
			w.Write([]byte(`{"events": []}`))
		default:
			http.Error(w, "no such page\nsecond line", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/prefix/", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Snapshot(context.Background())
	if err != nil || len(s.Targets) != 3 {
		t.Fatalf("snapshot: %v, %+v", err, s)
	}
	if _, err := c.Timeline(context.Background(), "vm 1", 5); err != nil || asked != "domain=vm+1&limit=10000&seconds=5" {
		t.Errorf("timeline: %v, query %q", err, asked)
	}
	c, _ = New(srv.URL, nil)
	_, err = c.Snapshot(context.Background())
	if err == nil || !strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "\n") {
		t.Errorf("404: %v", err)
	}
	// An agent that accepts and never answers: the client's timeout ends it.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	c, _ = New(hang.URL, &http.Client{Timeout: 100 * time.Millisecond})
	start := time.Now()
	if _, err := c.Snapshot(context.Background()); err == nil || !strings.Contains(err.Error(), "does not answer") || time.Since(start) > 5*time.Second {
		t.Errorf("hanging agent: %v after %v", err, time.Since(start))
	}
	for _, u := range []string{"gpu-host:9477", "ftp://x", "http://", "::"} {
		if _, err := New(u, nil); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
}
