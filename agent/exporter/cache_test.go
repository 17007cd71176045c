package exporter

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
)

// countingSource counts the snapshots taken; while gate is set, each
// waits for it to close.
type countingSource struct {
	fixed
	n    atomic.Int64
	gate chan struct{}
}

func (c *countingSource) Snapshot() model.Snapshot {
	c.n.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	return c.fixed.Snapshot()
}

// TestConcurrentScrapesShareOneCollection: scrapes that arrive while the
// first collection is under way wait for it and get its result; none
// collects again. Without the cache each scrape took its own snapshot.
func TestConcurrentScrapesShareOneCollection(t *testing.T) {
	const scrapers = 20
	src := &countingSource{fixed: fixed{snap: testSnapshot()}, gate: make(chan struct{})}
	h, err := NewHandler(src, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	clk := &lockedClock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	h.stats.cache.now = clk.now // no collection expires but when the test says
	srv := httptest.NewServer(h)
	defer srv.Close()
	var wg sync.WaitGroup
	bodies := make([]string, scrapers)
	for i := range scrapers {
		wg.Go(func() { bodies[i] = get(t, srv.URL+"/metrics", 200) })
	}
	// Every scrape is in the handler, one of them collecting, before the
	// collection may end.
	for h.stats.inFlight.Load() < scrapers {
		time.Sleep(time.Millisecond)
	}
	close(src.gate)
	wg.Wait()
	if n := src.n.Load(); n != 1 {
		t.Errorf("%d concurrent scrapes took %d snapshots, want 1", scrapers, n)
	}
	for i, b := range bodies[1:] {
		if b != bodies[0] {
			t.Errorf("scrape %d differs from the first", i+1)
		}
	}
	if !strings.Contains(bodies[0], `vgpu_probe_vcpu_preemptions_total{domain="vm1",vcpu="0"} 7`) {
		t.Error("the shared body lacks the target's series")
	}
	// Once the collection is MetricsMaxAge old the next scrape starts
	// another and, while it runs, is served the previous one at once.
	src.gate = make(chan struct{})
	clk.add(MetricsMaxAge)
	if b := get(t, srv.URL+"/metrics", 200); b != bodies[0] {
		t.Error("a scrape during the next collection did not get the previous one")
	}
	close(src.gate)
	for h.stats.cache.gathers.Load() < 2 || collecting(h.stats.cache) {
		time.Sleep(time.Millisecond)
	}
	if n := src.n.Load(); n != 2 {
		t.Errorf("after MetricsMaxAge: %d snapshots, want 2", n)
	}
	if b := get(t, srv.URL+"/metrics", 200); !strings.Contains(b, "vgpu_probe_http_metrics_collections_total 2\n") {
		t.Errorf("metrics_collections_total is not 2 after two collections:\n%s", grepLines(b, "vgpu_probe_http_"))
	}
	// A collection older than MetricsMaxStale is not served: the scrape
	// waits for the next.
	clk.add(MetricsMaxStale)
	get(t, srv.URL+"/metrics", 200)
	if n := src.n.Load(); n != 3 {
		t.Errorf("after MetricsMaxStale: %d snapshots, want 3 (the scrape waits for a fresh one)", n)
	}
}

func collecting(c *metricsCache) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.collecting != nil
}

// lockedClock is a settable clock safe to read from the collection's
// goroutine.
type lockedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (l *lockedClock) now() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t
}

func (l *lockedClock) add(d time.Duration) {
	l.mu.Lock()
	l.t = l.t.Add(d)
	l.mu.Unlock()
}

// TestMetricsEncodings: the cached bodies are what promhttp would serve:
// gzip when asked, protobuf for a Prometheus that asks for it.
func TestMetricsEncodings(t *testing.T) {
	srv := httptest.NewServer(mustHandler(t))
	defer srv.Close()
	do := func(accept, enc string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		req.Header.Set("Accept", accept)
		req.Header.Set("Accept-Encoding", enc)
		tr := &http.Transport{DisableCompression: true}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := do("text/plain", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding gzip: Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !strings.Contains(string(plain), "vgpu_probe_agent_ring_drops_total 3\n") {
		t.Errorf("gzipped body: %v\n%.300s", err, plain)
	}
	proto := "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
	resp, b = do(proto, "")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/vnd.google.protobuf") {
		t.Fatalf("protobuf asked: Content-Type %q", resp.Header.Get("Content-Type"))
	}
	dec := expfmt.NewDecoder(bytes.NewReader(b), expfmt.NewFormat(expfmt.TypeProtoDelim))
	found := false
	for {
		var f dto.MetricFamily
		if err := dec.Decode(&f); err != nil {
			break
		}
		found = found || f.GetName() == "vgpu_probe_agent_ring_drops_total"
	}
	if !found {
		t.Error("the protobuf body lacks vgpu_probe_agent_ring_drops_total")
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// gatherFunc is a prometheus.Gatherer.
type gatherFunc func() ([]*dto.MetricFamily, error)

func (f gatherFunc) Gather() ([]*dto.MetricFamily, error) { return f() }

// TestWaitOutlastsCollection: a collection a request started goes on
// reading the source after the answer; Wait returns only once it has
// ended, so that the agent closes its programs after the last read.
func TestWaitOutlastsCollection(t *testing.T) {
	gate, reading := make(chan struct{}), make(chan struct{})
	var ended atomic.Bool
	c := newMetricsCache(gatherFunc(func() ([]*dto.MetricFamily, error) {
		close(reading)
		<-gate
		ended.Store(true)
		return nil, nil
	}), time.Second, nil)
	go c.current()
	<-reading
	waited := make(chan struct{})
	go func() { c.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a collection was reading the source")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-waited
	if !ended.Load() {
		t.Fatal("Wait returned before the collection ended")
	}
	c.wait() // none running: returns at once
}
