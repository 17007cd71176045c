package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/input"
)

// Corunner is a task group that took the CPU from a thread.
type Corunner struct {
	TGID          uint32  `json:"tgid"`
	Comm          string  `json:"comm"`
	Preemptions   uint64  `json:"preemptions"`
	WaitedSeconds float64 `json:"waited_seconds"`
}

// Thread is one watched thread (a vCPU of a VM, or a thread of a pid or
// cgroup target).
type Thread struct {
	TID                  int        `json:"tid"`
	VCPU                 int        `json:"vcpu"` // -1: not a vCPU thread
	RunSeconds           float64    `json:"run_seconds"`
	OffCPUSeconds        float64    `json:"offcpu_seconds"`
	RunnableWaitSeconds  float64    `json:"runnable_wait_seconds"`
	Preemptions          uint64     `json:"preemptions"`
	Throttles            uint64     `json:"throttles"`
	RunP50US             float64    `json:"run_p50_us"`
	OffCPUP50US          float64    `json:"offcpu_p50_us"`
	OffCPUP99US          float64    `json:"offcpu_p99_us"`
	WakeP50US            float64    `json:"wake_p50_us"`
	WakeP99US            float64    `json:"wake_p99_us"`
	SliceP50US           float64    `json:"slice_p50_us"`
	PreemptionsPerSecond float64    `json:"preemptions_per_second"`
	StealFraction        float64    `json:"steal_fraction"`
	Contended            bool       `json:"contended"`
	Corunners            []Corunner `json:"corunners,omitempty"`
}

// Target is one watched VM (kind "domain"), process ("pid") or cgroup.
type Target struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	PeriodUS int64    `json:"period_us,omitempty"`
	QuotaUS  int64    `json:"quota_us,omitempty"`
	Threads  []Thread `json:"threads"`
}

// Snapshot is the agent's view of its targets over a window.
type Snapshot struct {
	Time          time.Time `json:"time"`
	WindowSeconds float64   `json:"window_seconds"`
	EventDrops    uint64    `json:"event_drops"`
	Targets       []Target  `json:"targets"`
}

// OffCPU is one interval a watched thread spent off the CPU, and the run
// that preceded it: what /api/v1/timeline serves.
type OffCPU struct {
	TID  uint32 `json:"tid"`
	VCPU int    `json:"vcpu"`
	CPU  uint32 `json:"cpu"` // the CPU it came back on
	// StartNs and EndNs are CLOCK_MONOTONIC: switched out, switched in.
	StartNs, EndNs uint64
	RunUS          float64 // on-CPU time that ended at StartNs (0: unknown)
	// Preempted: it left while still runnable; Throttled: its bandwidth
	// quota ran out; Waited: it came back after waiting for a CPU.
	Preempted, Throttled, Waited bool
	OtherComm                    string // who took the CPU, when known
}

// OffUS is the interval's length in µs.
func (o OffCPU) OffUS() float64 { return float64(o.EndNs-o.StartNs) / 1e3 }

// rawEvent is the union of the two timeline formats the agent has
// served: one entry per off-CPU interval (now), and one per switch with
// kind "in" or "out" (before; kept so that saved timelines still load).
type rawEvent struct {
	// Interval format.
	InMonoNs  uint64  `json:"in_mono_ns"`
	RunUS     float64 `json:"run_us"`
	OffUS     float64 `json:"off_us"`
	Throttled bool    `json:"throttled"`
	Waited    bool    `json:"waited"`
	// Switch format.
	Kind       string  `json:"kind"`
	MonoNs     uint64  `json:"mono_ns"`
	IntervalUS float64 `json:"interval_us"`
	// Both.
	TID       uint32 `json:"tid"`
	VCPU      int    `json:"vcpu"`
	CPU       uint32 `json:"cpu"`
	Preempted bool   `json:"preempted"`
	OtherComm string `json:"other_comm"`
}

func intervals(raw []rawEvent) []OffCPU {
	var out []OffCPU
	switches := false
	for _, e := range raw {
		if e.Kind != "" {
			switches = true
			break
		}
	}
	if !switches {
		for _, e := range raw {
			off := uint64(max(0, e.OffUS) * 1e3)
			if e.InMonoNs < off {
				continue // an absurd entry: it would start before the clock
			}
			out = append(out, OffCPU{TID: e.TID, VCPU: e.VCPU, CPU: e.CPU, StartNs: e.InMonoNs - off, EndNs: e.InMonoNs,
				RunUS: max(0, e.RunUS), Preempted: e.Preempted, Throttled: e.Throttled, Waited: e.Waited, OtherComm: e.OtherComm})
		}
		return out
	}
	// Switch format: pair each "out" with the thread's next "in".
	type open struct {
		at  uint64
		run float64
		ev  rawEvent
	}
	pending := map[uint32]open{}
	for _, e := range raw {
		switch e.Kind {
		case "out":
			pending[e.TID] = open{e.MonoNs, e.IntervalUS, e}
		case "in":
			o, ok := pending[e.TID]
			if !ok || e.MonoNs < o.at {
				continue
			}
			delete(pending, e.TID)
			out = append(out, OffCPU{TID: e.TID, VCPU: e.VCPU, CPU: e.CPU, StartNs: o.at, EndNs: e.MonoNs, RunUS: max(0, o.run),
				Preempted: o.ev.Preempted, Waited: e.Preempted, OtherComm: o.ev.OtherComm})
		}
	}
	return out
}

// ParseSnapshot decodes a snapshot, rejecting JSON that is not one (no
// targets array) with a one-line error.
func ParseSnapshot(b []byte) (*Snapshot, error) {
	var probe struct {
		Targets *json.RawMessage `json:"targets"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("not an agent snapshot: %w", err)
	}
	if probe.Targets == nil {
		return nil, errors.New("not an agent snapshot: no \"targets\"")
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("not an agent snapshot: %w", err)
	}
	return &s, nil
}

// ParseTimeline decodes a timeline: an object holding the entries under
// "events" (as /api/v1/timeline serves it) or a bare array, of off-CPU
// intervals or, from older agents, of switches.
func ParseTimeline(b []byte) ([]OffCPU, error) {
	evs, _, err := parseTimelinePage(b)
	return evs, err
}

// parseTimelinePage is ParseTimeline that also returns the page's "next"
// cursor ("" on the last page, and for a bare array).
func parseTimelinePage(b []byte) ([]OffCPU, string, error) {
	var raw []rawEvent
	if err := json.Unmarshal(b, &raw); err == nil {
		return intervals(raw), "", nil
	}
	var wrapped struct {
		Events *[]rawEvent `json:"events"`
		Next   string      `json:"next"`
	}
	if err := json.Unmarshal(b, &wrapped); err != nil || wrapped.Events == nil {
		if err == nil {
			err = errors.New("no \"events\"")
		}
		return nil, "", fmt.Errorf("not an agent timeline: %w", err)
	}
	return intervals(*wrapped.Events), wrapped.Next, nil
}

// Client talks to one agent.
type Client struct {
	base *url.URL
	http *http.Client
}

// New returns a client for the agent at rawURL (http://host:port, a path
// prefix allowed). A nil hc gets a client with a 10 s timeout, so that an
// agent that does not answer fails the report instead of hanging it.
func New(rawURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("agent URL %q: want http://HOST:PORT", rawURL)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Client{base: u, http: hc}, nil
}

// URL is the agent's base URL.
func (c *Client) URL() string { return c.base.String() }

// Snapshot fetches /api/v1/snapshot.
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	b, err := c.get(ctx, "/api/v1/snapshot", nil)
	if err != nil {
		return nil, err
	}
	s, err := ParseSnapshot(b)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", c.base, err)
	}
	return s, nil
}

// Timeline fetches the off-CPU intervals of the target called name that
// ended in the last seconds, following the agent's pages (an agent that
// does not page answers everything in one).
func (c *Client) Timeline(ctx context.Context, name string, seconds int) ([]OffCPU, error) {
	q := url.Values{"domain": {name}, "seconds": {strconv.Itoa(seconds)}, "limit": {strconv.Itoa(pageLimit)}}
	var out []OffCPU
	for pages := 0; ; pages++ {
		b, err := c.get(ctx, "/api/v1/timeline", q)
		if err != nil {
			return nil, err
		}
		evs, next, err := parseTimelinePage(b)
		if err != nil {
			return nil, fmt.Errorf("agent %s: timeline of %s: %w", c.base, name, err)
		}
		out = append(out, evs...)
		if next == "" {
			return out, nil
		}
		if pages >= maxPages {
			return nil, fmt.Errorf("agent %s: timeline of %s: more than %d pages", c.base, name, maxPages)
		}
		q.Set("cursor", next)
	}
}

// pageLimit is the events asked for per timeline page: the agent's
// maximum. maxPages stops a client that an agent keeps paging forever:
// a full ring of 256k events is 27 pages.
const (
	pageLimit = 10000
	maxPages  = 1000
)

// maxBody bounds what one response may hold: a timeline page is a few MB
// (older agents served a busy VM's whole timeline at once, tens of MB);
// anything far larger is not an agent. It is the bound on every input of
// `vgpu-probe report`.
const maxBody = input.MaxBytes

// busyRetries is how often a request the agent turns away as busy (503
// with Retry-After: it serves a few timeline and snapshot requests at a
// time) is tried again, waiting as told, at most maxRetryWait each time.
const (
	busyRetries  = 10
	maxRetryWait = 5 * time.Second
)

func (c *Client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	for try := 0; ; try++ {
		b, wait, err := c.getOnce(ctx, path, q)
		if wait == 0 || try == busyRetries {
			return b, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("agent %s: %s: %w", c.base, path, ctx.Err())
		}
	}
}

// getOnce is one request; a positive wait means the agent was busy and
// asked to be retried after it.
func (c *Client) getOnce(ctx context.Context, path string, q url.Values) (b []byte, wait time.Duration, err error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// net/http's message repeats the URL and the method; say it once.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, 0, fmt.Errorf("agent %s does not answer: %w", c.base, err)
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, 0, fmt.Errorf("agent %s: reading %s: %w", c.base, path, err)
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		wait = min(max(time.Duration(secs)*time.Second, 100*time.Millisecond), maxRetryWait)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(b))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, wait, fmt.Errorf("agent %s: %s: %s %s", c.base, path, resp.Status, msg)
	}
	return b, 0, nil
}
