package exporter

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

// Source is what the exporter serves (*monitor.Monitor).
type Source interface {
	Snapshot() model.Snapshot
	TimelinePage(name string, last time.Duration, cur monitor.TimelineCursor, limit int) (monitor.TimelinePage, error)
}

var _ Source = (*monitor.Monitor)(nil)

// Bounds of the API: what one request may cost.
const (
	// MaxTimelineSeconds bounds /api/v1/timeline's seconds parameter.
	MaxTimelineSeconds = 3600
	// DefaultTimelineLimit and MaxTimelineLimit are the events of one
	// timeline page: at most ~3.5 MB of JSON and ~2 MB of memory.
	DefaultTimelineLimit = 5000
	MaxTimelineLimit     = 10000
	// MaxHeavyRequests bounds the timeline and snapshot requests served
	// at once; more get 503 with Retry-After.
	MaxHeavyRequests = 4
)

// collector is one group of metrics, computed from a snapshot and sent
// through s.
type collector interface {
	describe(ch chan<- *prometheus.Desc)
	update(s *emitter, snap *model.Snapshot) error
}

type named struct {
	name string
	c    collector
}

var registered []named

// register is called from the init of each collector's file.
func register(name string, c collector) { registered = append(registered, named{name, c}) }

var (
	scrapeSuccess = prometheus.NewDesc(prometheus.BuildFQName(namespace, "scrape", "collector_success"),
		"Whether a collector succeeded.", []string{"collector"}, nil)
	scrapeDuration = prometheus.NewDesc(prometheus.BuildFQName(namespace, "scrape", "collector_duration_seconds"),
		"How long a collector took.", []string{"collector"}, nil)
)

// Collector is a prometheus.Collector over a Source: one snapshot per
// scrape, shared by every collector; a failing collector shows up as
// vgpu_probe_scrape_collector_success 0 without blanking the others.
type Collector struct {
	src   Source
	fails *limitedLog // a collector that fails on every scrape: a line a minute
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the agent's Prometheus collector.
func NewCollector(src Source, log zerolog.Logger) *Collector {
	return &Collector{src: src, fails: newLimitedLog(log, time.Minute)}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scrapeSuccess
	ch <- scrapeDuration
	for _, n := range registered {
		n.c.describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.src.Snapshot().Live() // a gone target's series end when it goes
	s := newEmitter(ch)
	for _, n := range registered {
		start := time.Now()
		ok := 1.0
		if err := errors.Join(n.c.update(s, &snap), s.take()); err != nil {
			c.fails.error(n.name, err, "collector "+n.name+" failed")
			ok = 0
		}
		s.metric(scrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds(), n.name)
		s.metric(scrapeSuccess, prometheus.GaugeValue, ok, n.name)
	}
}

// Handler serves /metrics, /api/v1/snapshot and /api/v1/timeline.
type Handler struct {
	mux   http.Handler
	stats *serverStats
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Wait returns once no /metrics collection is running, so that the
// source (the monitor, the loaded programs) may be closed: call it after
// the server has stopped.
func (h *Handler) Wait() { h.stats.cache.wait() }

// NewHandler serves /metrics, /api/v1/snapshot and /api/v1/timeline;
// extra collectors (the GPU's) are served on /metrics too. /metrics
// answers from one collection per MetricsMaxAge, however many ask.
func NewHandler(src Source, log zerolog.Logger, extra ...prometheus.Collector) (*Handler, error) {
	stats := &serverStats{}
	reg := prometheus.NewRegistry()
	for _, c := range append([]prometheus.Collector{
		NewCollector(src, log),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		Errors,
		Discovery,
		stats,
	}, extra...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	gatherErrs := newLimitedLog(log, time.Minute)
	stats.cache = newMetricsCache(reg, MetricsMaxAge, func(err error) {
		gatherErrs.error("collect", err, "collecting metrics failed in part: what was collected is served")
	})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", stats.cache)
	heavy := newLimiter(MaxHeavyRequests, &stats.refused)
	mux.Handle("GET /api/v1/snapshot", heavy.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, src.Snapshot())
	})))
	mux.Handle("GET /api/v1/timeline", heavy.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveTimeline(w, r, src)
	})))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("vgpu-probe agent\n\n/metrics\n/api/v1/snapshot\n/api/v1/timeline?domain=NAME&seconds=N&limit=N&cursor=C\n"))
	})
	return &Handler{mux: stats.count(mux), stats: stats}, nil
}

// limiter turns requests beyond its capacity away at once (503 and
// Retry-After) rather than queueing them: a queue would hold their memory.
type limiter struct {
	slots   chan struct{}
	refused *atomic.Uint64
}

func newLimiter(n int, refused *atomic.Uint64) limiter {
	return limiter{make(chan struct{}, n), refused}
}

func (l limiter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case l.slots <- struct{}{}:
			defer func() { <-l.slots }()
			h.ServeHTTP(w, r)
		default:
			l.refused.Add(1)
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, apiError{"busy: too many timeline and snapshot requests at once, retry later"})
		}
	})
}

// timelineQuery is /api/v1/timeline's parameters.
type timelineQuery struct {
	domain  string
	seconds float64
	limit   int
	cursor  monitor.TimelineCursor
}

func parseTimelineQuery(q url.Values) (timelineQuery, error) {
	tq := timelineQuery{domain: q.Get("domain"), seconds: 10, limit: DefaultTimelineLimit}
	if tq.domain == "" {
		return tq, errors.New("missing domain parameter")
	}
	if s := q.Get("seconds"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0) || v > MaxTimelineSeconds {
			return tq, fmt.Errorf("seconds must be a number in (0, %d]", MaxTimelineSeconds)
		}
		tq.seconds = v
	}
	if s := q.Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > MaxTimelineLimit {
			return tq, fmt.Errorf("limit must be an integer in [1, %d]", MaxTimelineLimit)
		}
		tq.limit = v
	}
	if s := q.Get("cursor"); s != "" {
		c, err := parseCursor(s)
		if err != nil {
			return tq, err
		}
		tq.cursor = c
	}
	return tq, nil
}

// The cursor is opaque to clients: the monitor's three numbers in hex.
func formatCursor(c monitor.TimelineCursor) string {
	return fmt.Sprintf("%x.%x.%x", c.Next, c.End, c.FromNs)
}

func parseCursor(s string) (monitor.TimelineCursor, error) {
	var c monitor.TimelineCursor
	parts := strings.Split(s, ".")
	if len(parts) == 3 {
		var err error
		for i, p := range []*uint64{&c.Next, &c.End, &c.FromNs} {
			if *p, err = strconv.ParseUint(parts[i], 16, 64); err != nil {
				break
			}
		}
		if err == nil && c.Next <= c.End {
			return c, nil
		}
	}
	return c, errors.New("cursor: not one this agent returned")
}

// serveTimeline writes one page, encoding event by event: the response
// never exists whole in memory.
func serveTimeline(w http.ResponseWriter, r *http.Request, src Source) {
	tq, err := parseTimelineQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	last := time.Duration(tq.seconds * float64(time.Second))
	p, err := src.TimelinePage(tq.domain, last, tq.cursor, tq.limit)
	if errors.Is(err, monitor.ErrUnknownTarget) {
		if name, ok := nameOfLabel(src, tq.domain); ok {
			p, err = src.TimelinePage(name, last, tq.cursor, tq.limit)
		}
	}
	if errors.Is(err, monitor.ErrUnknownTarget) {
		writeJSON(w, http.StatusNotFound, apiError{err.Error()})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{err.Error()})
		return
	}
	head := timelineHead{Domain: tq.domain, Seconds: tq.seconds, Overwritten: p.Overwritten}
	if p.More {
		head.Next = formatCursor(p.Cursor)
	}
	b, err := json.Marshal(head)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	// The head's fields, then the events, one a line.
	bw := bufio.NewWriter(w)
	bw.Write(b[:len(b)-1])
	bw.WriteString(`,"events":[`)
	enc := json.NewEncoder(bw)
	for i := range p.Events {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
		if enc.Encode(&p.Events[i]) != nil {
			return
		}
	}
	bw.WriteString("]}\n")
	_ = bw.Flush() // the client went away; nothing to do
}

// nameOfLabel finds the target whose name LabelValue made label (one
// that is not UTF-8, or too long): a client has only the label, or the
// snapshot's name, which encoding/json writes the same where it is not
// cut. Other labels are names as they are, and cost no snapshot.
func nameOfLabel(src Source, label string) (string, bool) {
	if !strings.ContainsRune(label, utf8.RuneError) && len(label) < MaxLabelValueBytes-utf8.UTFMax {
		return "", false
	}
	for _, t := range src.Snapshot().Targets {
		if t.Name != label && LabelValue(t.Name) == label {
			return t.Name, true
		}
	}
	return "", false
}

type apiError struct {
	Error string `json:"error"`
}

// timelineHead is a timeline page without its events. Next, present when
// there is more, is the cursor of the next page; Overwritten counts the
// events lost since the previous page because the reader fell behind.
type timelineHead struct {
	Domain      string  `json:"domain"`
	Seconds     float64 `json:"seconds"`
	Next        string  `json:"next,omitempty"`
	Overwritten uint64  `json:"overwritten,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}
