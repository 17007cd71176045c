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

// metricsCache serves /metrics from one collection per MetricsMaxAge:
// the first request after it expires collects (the others wait for it
// rather than collecting too) and each encoding the clients ask for
// (text or protobuf, gzipped or not) is made once and shared.
type metricsCache struct {
	g      prometheus.Gatherer
	maxAge time.Duration
	now    func() time.Time
	onErr  func(error)

	mu      sync.Mutex
	at      time.Time // of the collection the bodies encode
	bodies  map[cacheKey][]byte
	fams    []*dto.MetricFamily
	err     error         // of that collection: served as 500 until it expires
	gathers atomic.Uint64 // collections made
}

type cacheKey struct {
	format expfmt.Format
	gzip   bool
}

func newMetricsCache(g prometheus.Gatherer, maxAge time.Duration, onErr func(error)) *metricsCache {
	return &metricsCache{g: g, maxAge: maxAge, now: time.Now, onErr: onErr}
}

// body returns the encoded metrics for k, collecting when the last
// collection is older than maxAge.
func (c *metricsCache) body(k cacheKey) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bodies == nil || c.now().Sub(c.at) >= c.maxAge {
		c.gathers.Add(1)
		c.fams, c.err = c.g.Gather()
		c.bodies = map[cacheKey][]byte{}
		c.at = c.now() // a slow collection still serves for maxAge after it ends
		if c.err != nil && c.onErr != nil {
			c.onErr(c.err)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	if b, ok := c.bodies[k]; ok {
		return b, nil
	}
	b, err := encode(c.fams, k)
	if err != nil {
		return nil, err
	}
	c.bodies[k] = b
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
	k := cacheKey{format: expfmt.Negotiate(r.Header), gzip: acceptsGzip(r.Header)}
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
