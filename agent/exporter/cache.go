package exporter

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// MetricsMaxAge is how long one collection serves /metrics. A collection
// over 200 targets costs a quarter of a CPU second; without the cache
// every concurrent scraper paid it again, and 60 of them starved
// Prometheus' own scrape past its timeout. Two Prometheus servers of an
// HA pair, or any number of clients, within the same second share one.
const MetricsMaxAge = time.Second

// MetricsMaxStale is how old a collection may be and still be served
// while the next one is being made: a scrape then answers at once
// instead of waiting a loaded host's collection out. Older than that (or
// none yet), it waits for the collection.
const MetricsMaxStale = 10 * time.Second

// metricsCache serves /metrics from one collection per MetricsMaxAge.
// The first request after it expires starts the next collection, in the
// background; until that ends, requests get the previous one (if younger
// than MetricsMaxStale, else they wait). Each encoding the clients ask
// for (text or protobuf, gzipped or not) is made once per collection and
// shared.
type metricsCache struct {
	g        prometheus.Gatherer
	maxAge   time.Duration
	maxStale time.Duration
	now      func() time.Time
	onErr    func(error)

	mu         sync.Mutex
	cur        *collection   // the latest; nil before the first
	collecting chan struct{} // closed when the collection under way ends; nil when none is
	gathers    atomic.Uint64 // collections made
}

// collection is one Gather and its encodings.
type collection struct {
	at   time.Time
	fams []*dto.MetricFamily

	mu     sync.Mutex
	bodies map[cacheKey][]byte
}

type cacheKey struct {
	format expfmt.Format
	gzip   bool
}

func newMetricsCache(g prometheus.Gatherer, maxAge time.Duration, onErr func(error)) *metricsCache {
	return &metricsCache{g: g, maxAge: maxAge, maxStale: MetricsMaxStale, now: time.Now, onErr: onErr}
}

// current returns the collection to serve, starting the next one when
// the latest is older than maxAge and waiting for it when there is none
// younger than maxStale.
func (c *metricsCache) current() *collection {
	c.mu.Lock()
	cur := c.cur
	if cur != nil && c.now().Sub(cur.at) < c.maxAge {
		c.mu.Unlock()
		return cur
	}
	done := c.collecting
	if done == nil {
		done = make(chan struct{})
		c.collecting = done
		go c.collect(done)
	}
	c.mu.Unlock()
	if cur != nil && c.now().Sub(cur.at) < c.maxStale {
		return cur
	}
	<-done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// wait returns once no collection is running: one a request started
// goes on after the answer (served from the last one), and it reads the
// source, which its owner closes after the server stops.
func (c *metricsCache) wait() {
	c.mu.Lock()
	done := c.collecting
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (c *metricsCache) collect(done chan struct{}) {
	c.gathers.Add(1)
	// A failed Gather still returns every family it could make: served,
	// as promhttp's ContinueOnError does, with the error in the log. A
	// series the registry refuses (our collectors send none: emitter)
	// must not blind every other VM's, nor put a stack trace in the body.
	fams, err := c.g.Gather()
	if err != nil && c.onErr != nil {
		c.onErr(err)
	}
	col := &collection{fams: fams, bodies: map[cacheKey][]byte{}}
	c.mu.Lock()
	col.at = c.now() // a slow collection still serves for maxAge after it ends
	c.cur, c.collecting = col, nil
	c.mu.Unlock()
	close(done)
}

// body returns the encoded metrics for k.
func (c *metricsCache) body(k cacheKey) ([]byte, error) {
	col := c.current()
	col.mu.Lock()
	defer col.mu.Unlock()
	if b, ok := col.bodies[k]; ok {
		return b, nil
	}
	b, err := encode(col.fams, k)
	if err != nil {
		return nil, err
	}
	col.bodies[k] = b
	return b, nil
}

func encode(fams []*dto.MetricFamily, k cacheKey) ([]byte, error) {
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if k.gzip {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	e := expfmt.NewEncoder(w, k.format)
	for _, f := range fams {
		if err := e.Encode(f); err != nil {
			return nil, err
		}
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// ServeHTTP negotiates the format as promhttp does (the text format, or
// protobuf for a Prometheus that asks for it) and gzips when asked.
func (c *metricsCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := cacheKey{format: expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...), gzip: acceptsGzip(r.Header)}
	b, err := c.body(k)
	if err != nil {
		http.Error(w, "collecting metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", string(k.format))
	if k.gzip {
		h.Set("Content-Encoding", "gzip")
	}
	h.Add("Vary", "Accept-Encoding")
	_, _ = w.Write(b) // the client went away; nothing to do
}

func acceptsGzip(h http.Header) bool {
	for _, part := range strings.Split(h.Get("Accept-Encoding"), ",") {
		enc, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(enc, "gzip") {
			return true
		}
	}
	return false
}
