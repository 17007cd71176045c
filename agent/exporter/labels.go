package exporter

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxLabelValueBytes bounds every label value the agent exposes. It keeps
// a Kubernetes container's cgroup path (about 180 bytes) whole; a
// discovered VM name is cut to 128 bytes before it gets here.
const MaxLabelValueBytes = 256

// LabelValue is s made a label value: each byte that is not part of
// valid UTF-8 becomes U+FFFD, as encoding/json writes it in the JSON
// snapshot (so a label and the snapshot show one name the same), and a
// value longer than MaxLabelValueBytes is cut to it at a character
// boundary. Names come from processes, cgroups and libvirt, which hold
// bytes, not text; the client library refuses a value that is not UTF-8,
// and one refused series used to fail every scrape.
func LabelValue(s string) string {
	if len(s) <= MaxLabelValueBytes && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s { // an invalid byte ranges as utf8.RuneError, U+FFFD
		if b.Len()+utf8.RuneLen(r) > MaxLabelValueBytes {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// emitter sends a collector's metrics; every metric this package makes is
// made here. Label values go through LabelValue, and a series already
// sent in the collection is left out: two names that differ only in what
// LabelValue replaced or cut are one series, and the registry fails the
// whole collection on a repeated series as it does on a value it
// refuses.
type emitter struct {
	ch   chan<- prometheus.Metric
	sent map[seriesKey]bool
	left int   // series left out since the last take
	err  error // the first metric the library refused since the last take
}

type seriesKey struct {
	d *prometheus.Desc
	// The label values joined with 0xff, a byte that valid UTF-8 never
	// holds: distinct value lists give distinct keys.
	lv string
}

func newEmitter(ch chan<- prometheus.Metric) *emitter {
	return &emitter{ch: ch, sent: map[seriesKey]bool{}}
}

// values returns lv made label values, and false for a series already
// sent.
func (s *emitter) values(d *prometheus.Desc, lv []string) ([]string, bool) {
	out := make([]string, len(lv))
	for i, v := range lv {
		out[i] = LabelValue(v)
	}
	k := seriesKey{d, strings.Join(out, "\xff")}
	if s.sent[k] {
		s.left++
		return nil, false
	}
	s.sent[k] = true
	return out, true
}

// metric sends a counter or gauge.
func (s *emitter) metric(d *prometheus.Desc, t prometheus.ValueType, v float64, lv ...string) {
	if lv, ok := s.values(d, lv); ok {
		s.send(prometheus.NewConstMetric(d, t, v, lv...))
	}
}

// histogram sends a histogram.
func (s *emitter) histogram(d *prometheus.Desc, count uint64, sum float64, buckets map[float64]uint64, lv ...string) {
	if lv, ok := s.values(d, lv); ok {
		s.send(prometheus.NewConstHistogram(d, count, sum, buckets, lv...))
	}
}

// send sends m; a metric the library refuses (a bug here, not a value
// from outside) is left out, never a panic that fails the collection.
func (s *emitter) send(m prometheus.Metric, err error) {
	if err != nil {
		s.err = cmp.Or(s.err, err)
		return
	}
	s.ch <- m
}

// take returns what was left out since it was last called, and forgets
// it: the failure of the collector that sent those.
func (s *emitter) take() error {
	var err error
	if s.left > 0 {
		err = fmt.Errorf("%d series left out: their label values, made valid and bounded, repeat another's", s.left)
	}
	err = errors.Join(err, s.err)
	s.left, s.err = 0, nil
	return err
}
