package exporter

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	httpInFlight = prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "requests_in_flight"),
		"Requests being served now.", nil, nil)
	httpBusy = prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "requests_refused_total"),
		"Timeline and snapshot requests turned away with 503 because as many were being served already.", nil, nil)
	httpOpen = prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "connections_open"),
		"Connections open now.", nil, nil)
	httpMax = prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "connections_max"),
		"The connection cap now (from the file limit, the memory limit and the live heap).", nil, nil)
	httpEvicted = prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "connections_evicted_total"),
		"Idle connections closed to admit new ones at the cap.", nil, nil)
	httpTLSErrors = prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "tls_handshake_errors_total"),
		"TLS handshakes that failed (a client without the CA, a port scanner).", nil, nil)
	httpCollections = prometheus.NewDesc(prometheus.BuildFQName(namespace, "http", "metrics_collections_total"),
		"Collections made for /metrics; scrapes within a second of one share it.", nil, nil)
)

// serverStats is what the HTTP server exports about itself. The
// connection figures come from the server's connection cap once Serve
// attaches it; a handler served otherwise (a test's httptest server)
// exports none.
type serverStats struct {
	inFlight  atomic.Int64
	refused   atomic.Uint64
	tlsErrors atomic.Uint64

	mu    sync.Mutex
	conns *conns
	cache *metricsCache
}

func (s *serverStats) attach(c *conns) {
	s.mu.Lock()
	s.conns = c
	s.mu.Unlock()
}

// count wraps h to count the requests in flight.
func (s *serverStats) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		h.ServeHTTP(w, r)
	})
}

func (s *serverStats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{httpInFlight, httpBusy, httpOpen, httpMax, httpEvicted, httpTLSErrors, httpCollections} {
		ch <- d
	}
}

func (s *serverStats) Collect(ch chan<- prometheus.Metric) {
	out := newEmitter(ch)
	out.metric(httpInFlight, prometheus.GaugeValue, float64(s.inFlight.Load()))
	out.metric(httpBusy, prometheus.CounterValue, float64(s.refused.Load()))
	out.metric(httpTLSErrors, prometheus.CounterValue, float64(s.tlsErrors.Load()))
	s.mu.Lock()
	c := s.conns
	s.mu.Unlock()
	if s.cache != nil {
		out.metric(httpCollections, prometheus.CounterValue, float64(s.cache.gathers.Load()))
	}
	if c == nil {
		return
	}
	open, max, evicted := c.stats()
	out.metric(httpOpen, prometheus.GaugeValue, float64(open))
	out.metric(httpMax, prometheus.GaugeValue, float64(max))
	out.metric(httpEvicted, prometheus.CounterValue, float64(evicted))
}
