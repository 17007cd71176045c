package agentapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

// numbered is an agent source whose timeline holds n intervals, the i-th
// ending at 1000+i ns.
type numbered struct{ n int }

func (numbered) Snapshot() model.Snapshot { return model.Snapshot{} }

func (s numbered) TimelinePage(_ string, _ time.Duration, cur monitor.TimelineCursor, limit int) (monitor.TimelinePage, error) {
	if cur == (monitor.TimelineCursor{}) {
		cur.End = uint64(s.n)
	}
	var p monitor.TimelinePage
	for ; cur.Next < cur.End && len(p.Events) < limit; cur.Next++ {
		p.Events = append(p.Events, model.TimelineEvent{TID: 7, InMonoNs: 1000 + cur.Next, OffUS: 0.5})
	}
	p.Cursor, p.More = cur, cur.Next < cur.End
	return p, nil
}

// TestClientFollowsPages: against the agent's own HTTP handler, a
// timeline longer than a page comes back whole, in order.
func TestClientFollowsPages(t *testing.T) {
	const n = 2*exporter.MaxTimelineLimit + 3
	h, err := exporter.NewHandler(numbered{n}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := c.Timeline(context.Background(), "vm", 3600)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Fatalf("%d intervals, want %d", len(evs), n)
	}
	for i, e := range evs {
		if e.EndNs != 1000+uint64(i) {
			t.Fatalf("interval %d ends at %d", i, e.EndNs)
		}
	}
}

// TestClientRetriesBusy: a 503 with Retry-After is tried again; one
// without it is an error at once.
func TestClientRetriesBusy(t *testing.T) {
	busy := 2
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("domain") == "down" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if busy > 0 {
			busy--
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"events": [{"in_mono_ns": 5000, "off_us": 1, "tid": 3}]}`))
	}))
	defer srv.Close()
	c, _ := New(srv.URL, nil)
	if evs, err := c.Timeline(context.Background(), "vm", 5); err != nil || len(evs) != 1 || busy != 0 {
		t.Fatalf("after two busy answers: %v, %v", evs, err)
	}
	if _, err := c.Timeline(context.Background(), "down", 5); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503 without Retry-After: %v", err)
	}
}
