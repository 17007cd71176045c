package agentapi

import (
	"context"
	"net/http/httptest"
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
