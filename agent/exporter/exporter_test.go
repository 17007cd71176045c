package exporter

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

// fixed is a Source with a fixed snapshot, for checking the export format
// (the numbers themselves are checked against the kernel in monitor), and
// a timeline of events numbered by their TID; hold, when set, holds each
// timeline request until it is closed.
type fixed struct {
	snap   model.Snapshot
	events int
	hold   chan struct{}
	// entered, when set, receives once per timeline request that is in
	// the handler (and so holds one of the heavy-request slots).
	entered chan struct{}
}

func (f fixed) Snapshot() model.Snapshot { return f.snap }

func (f fixed) TimelinePage(name string, _ time.Duration, cur monitor.TimelineCursor, limit int) (monitor.TimelinePage, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.hold != nil {
		<-f.hold
	}
	if name != "vm1" {
		return monitor.TimelinePage{}, fmt.Errorf("timeline of %q: %w", name, monitor.ErrUnknownTarget)
	}
	if cur == (monitor.TimelineCursor{}) {
		cur.End = uint64(f.events)
	}
	p := monitor.TimelinePage{}
	for ; cur.Next < cur.End && len(p.Events) < limit; cur.Next++ {
		p.Events = append(p.Events, model.TimelineEvent{TID: uint32(cur.Next), VCPU: 0, OffUS: 4000, Preempted: true})
	}
	p.Cursor, p.More = cur, cur.Next < cur.End
	return p, nil
}

func testSnapshot() model.Snapshot {
	c := &model.Counters{}
	c.Traced.OffCPUNs = 3e9
	c.Traced.OffCPU[model.Bucket(4e6)] = 500 // 500 intervals of ~4 ms
	c.Traced.OffCPU[model.Bucket(3e9)] = 1   // one beyond the last exported bucket
	slice := 4000.0
	return model.Snapshot{AttachMode: "raw_tp", EventDrops: 3, TracedTotalSeconds: 12.5, Targets: []model.Target{{
		Name: "vm1", Kind: "domain",
		Threads: []model.Thread{
			{TID: 11, VCPU: 0, Preemptions: 7, RunSeconds: 2, Cumulative: c, Contended: true, ExpectedSliceUS: &slice, RemainingSliceUS: &slice,
				Corunners: []model.Corunner{{TGID: 5, Comm: "stress", Key: "/system.slice/stress.service", WaitedSeconds: 1.5}}},
			// Same vCPU index twice, and two threads that are not vCPUs:
			// each label value is one series whatever the threads.
			{TID: 12, VCPU: 0, RunSeconds: 1, Cumulative: &model.Counters{}},
			{TID: 13, VCPU: -1, Preemptions: 2, Cumulative: &model.Counters{}},
			{TID: 14, VCPU: -1, Preemptions: 3, Cumulative: &model.Counters{}},
		},
		Corunners: []model.CorunnerWait{{Key: "/system.slice/stress.service", Preemptions: 4, WaitedSeconds: 1.5}},
	}}}
}

func TestMetrics(t *testing.T) {
	c := NewCollector(fixed{snap: testSnapshot()}, zerolog.Nop())
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP vgpu_probe_vcpu_preemptions_total Switch-outs while still runnable (involuntary).
# TYPE vgpu_probe_vcpu_preemptions_total counter
vgpu_probe_vcpu_preemptions_total{domain="vm1",vcpu="0"} 7
vgpu_probe_vcpu_preemptions_total{domain="vm1",vcpu="none"} 5
# HELP vgpu_probe_agent_ring_drops_total Switch events lost because the BPF ring buffer was full (timelines have gaps; counters do not).
# TYPE vgpu_probe_agent_ring_drops_total counter
vgpu_probe_agent_ring_drops_total 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "vgpu_probe_vcpu_preemptions_total", "vgpu_probe_agent_ring_drops_total"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mustHandler(t))
	defer srv.Close()
	body := get(t, srv.URL+"/metrics", 200)
	for _, line := range []string{
		// The off-CPU histogram, per target: 500 samples below 2^23 ns
		// (8.4 ms), none below 2^21 (2.1 ms), 501 in all, sum exact.
		`vgpu_probe_vcpu_offcpu_seconds_bucket{domain="vm1",le="0.002097152"} 0`,
		`vgpu_probe_vcpu_offcpu_seconds_bucket{domain="vm1",le="0.008388608"} 500`,
		`vgpu_probe_vcpu_offcpu_seconds_bucket{domain="vm1",le="+Inf"} 501`,
		`vgpu_probe_vcpu_offcpu_seconds_sum{domain="vm1"} 3`,
		`vgpu_probe_vcpu_run_seconds_total{domain="vm1",vcpu="0"} 3`,
		`vgpu_probe_vcpu_contended{domain="vm1",vcpu="0"} 1`,
		`vgpu_probe_vcpu_expected_slice_seconds{domain="vm1",vcpu="0"} 0.004`,
		`vgpu_probe_vcpu_contended{domain="vm1",vcpu="none"} 0`,
		`vgpu_probe_vcpu_traced_corunner_wait_seconds_total{corunner="/system.slice/stress.service",domain="vm1"} 1.5`,
		`vgpu_probe_target_info{domain="vm1",kind="domain"} 1`,
		`vgpu_probe_agent_traced_seconds_total 12.5`,
		`vgpu_probe_agent_tracing 0`,
		`vgpu_probe_scrape_collector_success{collector="vcpu"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	// Uncontended: no slice at all rather than +Inf.
	for _, absent := range []string{`vcpu="none"} +Inf`, `expected_slice_seconds{domain="vm1",vcpu="none"}`, "+Inf\n"} {
		if strings.Contains(body, absent) {
			t.Errorf("/metrics has %q", absent)
		}
	}
}

func mustHandler(t *testing.T) http.Handler {
	return handlerOf(t, fixed{snap: testSnapshot(), events: 1})
}

func handlerOf(t *testing.T, src Source) http.Handler {
	t.Helper()
	h, err := NewHandler(src, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(t *testing.T, url string, code int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, code)
	}
	return string(b)
}

func TestSnapshotAndTimelineAPI(t *testing.T) {
	srv := httptest.NewServer(mustHandler(t))
	defer srv.Close()
	var snap struct {
		Targets []struct {
			Name    string `json:"name"`
			Kind    string `json:"kind"`
			Threads []struct {
				TID  int `json:"tid"`
				VCPU int `json:"vcpu"`
			} `json:"threads"`
		} `json:"targets"`
	}
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/api/v1/snapshot", 200)), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Targets) != 1 || snap.Targets[0].Kind != "domain" || len(snap.Targets[0].Threads) != 4 {
		t.Fatalf("snapshot %+v", snap)
	}
	if !strings.Contains(get(t, srv.URL+"/api/v1/timeline?domain=vm1&seconds=5", 200), `"tid":0,`) {
		t.Fatal("timeline lacks the event")
	}
	get(t, srv.URL+"/api/v1/timeline?domain=nope", 404)
	get(t, srv.URL+"/api/v1/timeline", 400)
	for _, bad := range []string{"x", "-1", "0", "NaN", "1e9"} {
		get(t, srv.URL+"/api/v1/timeline?domain=vm1&seconds="+bad, 400)
	}
	for _, bad := range []string{"limit=0", "limit=10001", "limit=x", "cursor=x", "cursor=1.2", "cursor=5.4.0", "cursor=g.1.1"} {
		get(t, srv.URL+"/api/v1/timeline?domain=vm1&"+bad, 400)
	}
}

// TestTimelinePages: no page holds more than its limit (the default, or
// the maximum whatever is asked), and following the cursors reads every
// event once, in order.
func TestTimelinePages(t *testing.T) {
	srv := httptest.NewServer(handlerOf(t, fixed{events: 2*MaxTimelineLimit + 5}))
	defer srv.Close()
	type page struct {
		Domain string `json:"domain"`
		Next   string `json:"next"`
		Events []struct {
			TID uint32 `json:"tid"`
		} `json:"events"`
	}
	read := func(query string) page {
		var p page
		if err := json.Unmarshal([]byte(get(t, srv.URL+"/api/v1/timeline?domain=vm1"+query, 200)), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := read(""); len(p.Events) != DefaultTimelineLimit || p.Next == "" || p.Domain != "vm1" {
		t.Fatalf("default page: %d events, next %q", len(p.Events), p.Next)
	}
	var (
		got   []uint32
		query = "&limit=" + strconv.Itoa(MaxTimelineLimit)
	)
	for pages := 1; ; pages++ {
		p := read(query)
		if len(p.Events) > MaxTimelineLimit {
			t.Fatalf("page %d: %d events", pages, len(p.Events))
		}
		for _, e := range p.Events {
			got = append(got, e.TID)
		}
		if p.Next == "" {
			if pages != 3 {
				t.Errorf("%d pages, want 3", pages)
			}
			break
		}
		query = "&limit=" + strconv.Itoa(MaxTimelineLimit) + "&cursor=" + url.QueryEscape(p.Next)
	}
	for i, tid := range got {
		if tid != uint32(i) {
			t.Fatalf("event %d is %d", i, tid)
		}
	}
	if len(got) != 2*MaxTimelineLimit+5 {
		t.Fatalf("read %d events, want %d", len(got), 2*MaxTimelineLimit+5)
	}
}

// TestHeavyLimit: timeline and snapshot requests beyond MaxHeavyRequests
// are turned away at once with 503 and Retry-After; /metrics still answers.
func TestHeavyLimit(t *testing.T) {
	hold, entered := make(chan struct{}), make(chan struct{}, MaxHeavyRequests)
	srv := httptest.NewServer(handlerOf(t, fixed{snap: testSnapshot(), events: 3, hold: hold, entered: entered}))
	defer srv.Close()
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // before Close (deferred last, runs first): Close waits for the held handlers
	held := make(chan int, MaxHeavyRequests)
	for range MaxHeavyRequests {
		go func() {
			resp, err := http.Get(srv.URL + "/api/v1/timeline?domain=vm1")
			if err != nil {
				held <- 0
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}()
	}
	for range MaxHeavyRequests {
		<-entered // every slot is taken
	}
	// A heavy request beyond the limit is turned away at once, with a
	// time to come back; /metrics is not limited.
	resp, err := http.Get(srv.URL + "/api/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("snapshot with every heavy slot held: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	get(t, srv.URL+"/metrics", 200)
	release()
	for range MaxHeavyRequests {
		if code := <-held; code != 200 {
			t.Errorf("held request: %d", code)
		}
	}
	get(t, srv.URL+"/api/v1/timeline?domain=vm1", 200)
}
