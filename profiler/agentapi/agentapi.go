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

// Event is one switch of a watched thread.
type Event struct {
	Time       time.Time `json:"time"`
	MonoNs     uint64    `json:"mono_ns"`
	Kind       string    `json:"kind"` // "in" or "out"
	TID        uint32    `json:"tid"`
	VCPU       int       `json:"vcpu"`
	CPU        uint32    `json:"cpu"`
	IntervalUS float64   `json:"interval_us"`
	Preempted  bool      `json:"preempted"`
	OtherTID   uint32    `json:"other_tid"`
	OtherComm  string    `json:"other_comm"`
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

// ParseTimeline decodes a timeline: a JSON array of events, or an object
// holding one under "events" (the agent may wrap it to add metadata).
func ParseTimeline(b []byte) ([]Event, error) {
	var evs []Event
	if err := json.Unmarshal(b, &evs); err == nil {
		return evs, nil
	}
	var wrapped struct {
		Events *[]Event `json:"events"`
	}
	if err := json.Unmarshal(b, &wrapped); err != nil || wrapped.Events == nil {
		if err == nil {
			err = errors.New("no \"events\"")
		}
		return nil, fmt.Errorf("not an agent timeline: %w", err)
	}
	return *wrapped.Events, nil
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

// Timeline fetches the last seconds of switches of the target called name.
func (c *Client) Timeline(ctx context.Context, name string, seconds int) ([]Event, error) {
	q := url.Values{"domain": {name}, "seconds": {strconv.Itoa(seconds)}}
	b, err := c.get(ctx, "/api/v1/timeline", q)
	if err != nil {
		return nil, err
	}
	evs, err := ParseTimeline(b)
	if err != nil {
		return nil, fmt.Errorf("agent %s: timeline of %s: %w", c.base, name, err)
	}
	return evs, nil
}

// maxBody bounds what one response may hold: a timeline of a busy VM is a
// few MB; anything far larger is not an agent.
const maxBody = 256 << 20

func (c *Client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// net/http's message repeats the URL and the method; say it once.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("agent %s does not answer: %w", c.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("agent %s: reading %s: %w", c.base, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(b))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, fmt.Errorf("agent %s: %s: %s %s", c.base, path, resp.Status, msg)
	}
	return b, nil
}
