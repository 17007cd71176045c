package exporter

import "github.com/prometheus/client_golang/prometheus"

// Kinds of the failures Errors counts. Each is a feature that keeps
// running for the other targets when one target's part of it fails.
const (
	// ErrorHints: a target's hint page could not be created, chowned or
	// opened (the publisher retries it).
	ErrorHints = "hints"
	// ErrorMitigate: a thread's slice could not be set or restored.
	ErrorMitigate = "mitigate"
)

// Errors counts the failures the agent logs and carries on from, by kind,
// as vgpu_probe_agent_errors_total: a feature that fails for a target
// that appeared after the start (a page it cannot chown, a thread whose
// slice it cannot set) shows up here as well as in the log. Every
// agent's /metrics serves it.
var Errors = newErrorCounter()

// ErrorCounter is a counter vector with every known kind present at 0,
// so that rate() and increase() see the first failure.
type ErrorCounter struct{ *prometheus.CounterVec }

func newErrorCounter() ErrorCounter {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "agent", Name: "errors_total",
		Help: "Failures the agent logged and carried on from, by kind (hints: a target's hint page; mitigate: a thread's slice).",
	}, []string{"kind"})
	for _, k := range []string{ErrorHints, ErrorMitigate} {
		v.WithLabelValues(LabelValue(k))
	}
	return ErrorCounter{v}
}

// Counter returns a function that counts one failure of kind, for the
// Failed hooks of the hints and mitigate options.
func (c ErrorCounter) Counter(kind string) func() {
	ctr := c.WithLabelValues(LabelValue(kind))
	return ctr.Inc
}
