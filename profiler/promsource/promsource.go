package promsource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
)

// Options say which server to ask, over what span and about which
// series.
type Options struct {
	URL   string
	Range time.Duration // what rates and distributions are over
	Match Selector
	// Timeout bounds each query, so that a server that does not answer
	// fails the report instead of hanging it.
	Timeout time.Duration
	// Client reaches the server (nil: a plain one).
	Client *http.Client
	// Now is when the queries are evaluated (zero: now).
	Now time.Time
}

// ParseRange reads --range in Prometheus's duration syntax (90s, 15m,
// 1h, 1d).
func ParseRange(s string) (time.Duration, error) {
	d, err := model.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--range %q: want a positive duration like 30s, 15m, 1h or 1d", s)
	}
	return time.Duration(d), nil
}

// CheckURL refuses a URL that is not http(s)://HOST[:PORT][/prefix].
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("prometheus URL %q: want http://HOST:PORT", raw)
	}
	return nil
}

// threadKey names one vcpu series set of one target of one host.
type threadKey struct{ instance, target, vcpu string }

type targetKey struct{ instance, target string }

// Load runs the queries and returns one agent input per scraped host
// (Prometheus's instance label), its snapshot rebuilt from the series:
// the same input `report --agent` gets from the agent itself. Errors are
// one line.
func Load(ctx context.Context, o Options) ([]report.AgentInput, error) {
	if err := CheckURL(o.URL); err != nil {
		return nil, err
	}
	c, err := api.NewClient(api.Config{Address: o.URL, Client: o.Client})
	if err != nil {
		return nil, fmt.Errorf("prometheus URL %q: %w", o.URL, err)
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	q := &querier{api: v1.NewAPI(c), o: o, rng: model.Duration(o.Range).String(), step: ageStep(o.Range).String()}
	threads, err := q.threads(ctx)
	if err != nil {
		return nil, err
	}
	ages, err := q.ages(ctx)
	if err != nil {
		return nil, err
	}
	if err := q.fillTargets(ctx, threads); err != nil {
		return nil, err
	}
	meta, err := q.meta(ctx)
	if err != nil {
		return nil, err
	}
	corunners, err := q.corunners(ctx)
	if err != nil {
		return nil, err
	}
	return assemble(threads, ages, meta, corunners, o), nil
}

// ageStep is the resolution of the age query: a second up to an hour's
// range (a 70 s old series' age within 1.5%), 3600 steps beyond.
func ageStep(rng time.Duration) model.Duration {
	return model.Duration(max(time.Second, (rng / 3600).Truncate(time.Second)))
}

type querier struct {
	api       v1.API
	o         Options
	rng, step string
}

// vector runs one query and returns its samples.
func (q *querier) vector(ctx context.Context, expr string) (model.Vector, error) {
	expr = expand(expr, q.o.Match, q.rng, q.step)
	ctx, cancel := context.WithTimeout(ctx, q.o.Timeout)
	defer cancel()
	v, _, _, err := q.api.Query(ctx, expr, q.o.Now)
	if err != nil {
		return nil, q.explain(err, expr)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("prometheus %s: answered a %s, not an instant vector, to %s", q.o.URL, v.Type(), expr)
	}
	return vec, nil
}

// threads runs the per-thread queries; the first one names the threads.
func (q *querier) threads(ctx context.Context) (map[threadKey]*agentapi.Thread, error) {
	out := map[threadKey]*agentapi.Thread{}
	for i, tq := range threadQueries {
		vec, err := q.vector(ctx, tq.expr)
		if err != nil {
			return nil, err
		}
		if i == 0 && len(vec) == 0 {
			return nil, fmt.Errorf("prometheus %s: no vgpu-probe series (%s%s) in the last %s: is an agent scraped?",
				q.o.URL, baseMetric, q.o.Match, q.rng)
		}
		for _, s := range vec {
			k := threadKey{label(s, instanceLabel), label(s, targetLabel), label(s, vcpuLabel)}
			th := out[k]
			if th == nil {
				if i > 0 {
					continue // a series that ended before the base one
				}
				th = newThread(k.vcpu)
				out[k] = th
			}
			tq.set(th, value(s))
		}
	}
	return out, nil
}

// ages runs the age query: each thread's series' age in seconds, at most
// the range.
func (q *querier) ages(ctx context.Context) (map[threadKey]float64, error) {
	vec, err := q.vector(ctx, ageQuery)
	if err != nil {
		return nil, err
	}
	out := map[threadKey]float64{}
	for _, s := range vec {
		if a := value(s); a > 0 {
			out[threadKey{label(s, instanceLabel), label(s, targetLabel), label(s, vcpuLabel)}] = min(a, q.o.Range.Seconds())
		}
	}
	return out, nil
}

// fillTargets runs the per-target queries and copies each value to the
// target's threads.
func (q *querier) fillTargets(ctx context.Context, threads map[threadKey]*agentapi.Thread) error {
	byTarget := map[targetKey][]*agentapi.Thread{}
	for k, th := range threads {
		tk := targetKey{k.instance, k.target}
		byTarget[tk] = append(byTarget[tk], th)
	}
	for _, tq := range targetQueries {
		vec, err := q.vector(ctx, tq.expr)
		if err != nil {
			return err
		}
		for _, s := range vec {
			for _, th := range byTarget[targetKey{label(s, instanceLabel), label(s, targetLabel)}] {
				tq.set(th, value(s))
			}
		}
	}
	return nil
}

// meta runs the queries that say what each target is.
func (q *querier) meta(ctx context.Context) (map[targetKey]*targetMeta, error) {
	out := map[targetKey]*targetMeta{}
	for _, mq := range metaQueries {
		vec, err := q.vector(ctx, mq.expr)
		if err != nil {
			return nil, err
		}
		for _, s := range vec {
			k := targetKey{label(s, instanceLabel), label(s, targetLabel)}
			if out[k] == nil {
				out[k] = &targetMeta{}
			}
			mq.set(out[k], func(name string) string { return label(s, name) }, value(s))
		}
	}
	return out, nil
}

// corunners runs the co-runner query: waited seconds by target and
// co-runner.
func (q *querier) corunners(ctx context.Context) (map[targetKey][]agentapi.Corunner, error) {
	vec, err := q.vector(ctx, corunnerQuery)
	if err != nil {
		return nil, err
	}
	out := map[targetKey][]agentapi.Corunner{}
	for _, s := range vec {
		k := targetKey{label(s, instanceLabel), label(s, targetLabel)}
		who, w := label(s, corunnerLabel), value(s)
		if w > 0 && who != selfCorunner && who != k.target {
			out[k] = append(out[k], agentapi.Corunner{Comm: who, WaitedSeconds: w})
		}
	}
	return out, nil
}

// explain turns a client error into one line that says what went wrong
// with the server, not with the report.
func (q *querier) explain(err error, expr string) error {
	u := q.o.URL
	var apiErr *v1.Error
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return fmt.Errorf("prometheus %s: no answer within %s (--timeout)", u, q.o.Timeout)
	case errors.As(err, &apiErr) && apiErr.Type == v1.ErrBadResponse:
		return fmt.Errorf("prometheus %s: not a Prometheus query API answer: %s", u, oneLine(apiErr.Msg))
	case errors.As(err, &apiErr) && (apiErr.Type == v1.ErrServer || apiErr.Type == v1.ErrClient):
		return fmt.Errorf("prometheus %s: %s (is this the server's base URL?)", u, oneLine(apiErr.Msg))
	case errors.As(err, &apiErr):
		return fmt.Errorf("prometheus %s: query %s: %s: %s", u, expr, apiErr.Type, oneLine(apiErr.Msg))
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	return fmt.Errorf("prometheus %s: cannot reach it: %s", u, oneLine(err.Error()))
}

// oneLine keeps an error from a server to one short line: it may quote
// a whole HTML page.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

func label(s *model.Sample, name string) string { return string(s.Metric[model.LabelName(name)]) }

// value is a sample's value, 0 for NaN (a histogram with no counts in
// the range), as the agent reports an empty distribution.
func value(s *model.Sample) float64 {
	v := float64(s.Value)
	if v != v {
		return 0
	}
	return v
}

func newThread(vcpu string) *agentapi.Thread {
	n, err := strconv.Atoi(vcpu)
	if err != nil || n < 0 {
		n = -1
	}
	return &agentapi.Thread{VCPU: n}
}

// assemble groups the threads by host and target into snapshots, in a
// stable order, and finishes each thread's values.
// A host's snapshot window is its oldest series' age within the range.
func assemble(threads map[threadKey]*agentapi.Thread, ages map[threadKey]float64, meta map[targetKey]*targetMeta, corunners map[targetKey][]agentapi.Corunner, o Options) []report.AgentInput {
	keys := make([]threadKey, 0, len(threads))
	for k := range threads {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.instance != b.instance {
			return a.instance < b.instance
		}
		if a.target != b.target {
			return a.target < b.target
		}
		return vcpuOrder(a.vcpu) < vcpuOrder(b.vcpu)
	})
	var out []report.AgentInput
	var snap *agentapi.Snapshot
	for _, k := range keys {
		if snap == nil || out[len(out)-1].URL != k.instance {
			snap = &agentapi.Snapshot{Time: o.Now.UTC()}
			out = append(out, report.AgentInput{URL: k.instance, Snapshot: snap})
		}
		n := len(snap.Targets)
		if n == 0 || snap.Targets[n-1].Name != k.target {
			snap.Targets = append(snap.Targets, newTarget(k.target, meta[targetKey{k.instance, k.target}]))
			n++
		}
		th := threads[k]
		age, ok := ages[k]
		if !ok {
			age = o.Range.Seconds() // a server that cannot say: the range, as rate() assumes
		}
		snap.WindowSeconds = max(snap.WindowSeconds, age)
		finish(th, k.vcpu, o.Range.Seconds(), age)
		t := &snap.Targets[n-1]
		if len(t.Threads) == 0 {
			th.Corunners = corunners[targetKey{k.instance, k.target}]
		}
		t.Threads = append(t.Threads, *th)
	}
	return out
}

// finish makes the rates mean what the agent's do. rate() divided what
// a series saw by the whole range: a series younger than the range
// (ageS seconds old) is rescaled to its age, never diluted. The series of
// vcpu="none" sum a target's other threads, of which some idle: their
// wait is shared out over the threads that were busy, counted as the
// CPU time they used and waited for per second (a single busy thread
// counts one), which is what the agent averages over.
func finish(th *agentapi.Thread, vcpu string, rangeS, ageS float64) {
	if ageS > 0 && ageS < rangeS {
		th.StealFraction *= rangeS / ageS
		th.PreemptionsPerSecond *= rangeS / ageS
	}
	if vcpu == noVCPU && ageS > 0 {
		busy := (th.RunSeconds + th.RunnableWaitSeconds) / ageS
		th.StealFraction /= max(1, busy)
	}
	th.StealFraction = min(1, max(0, th.StealFraction))
}

// vcpuOrder sorts vCPUs by number, then the others.
func vcpuOrder(v string) int {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return n
	}
	return int(^uint(0) >> 1)
}

func newTarget(name string, m *targetMeta) agentapi.Target {
	t := agentapi.Target{Name: name, Kind: guessKind(name)}
	if m != nil {
		if m.kind != "" {
			t.Kind = m.kind
		}
		t.QuotaUS, t.PeriodUS = m.quotaUS, m.periodUS
	}
	return t
}

// guessKind says what kind of target a name is when the agent is too old
// to export vgpu_probe_target_info: a pid is digits, a cgroup a path,
// anything else a domain.
func guessKind(name string) string {
	switch {
	case strings.HasPrefix(name, "/"):
		return "cgroup"
	case name != "" && strings.Trim(name, "0123456789") == "":
		return "pid"
	}
	return "domain"
}

// WindowNotes says over what span the rates of each host in fleet are:
// the range, or for a host whose series are younger, their age. Hosts
// with the same window share a note.
func WindowNotes(fleet []report.AgentInput, rng time.Duration) []string {
	var order []string
	hosts := map[string][]string{}
	for _, a := range fleet {
		if a.Snapshot == nil {
			continue
		}
		w := time.Duration(a.Snapshot.WindowSeconds * float64(time.Second)).Round(time.Second)
		var note string
		if w >= rng {
			note = fmt.Sprintf("prometheus: rates over the last %s (--range)", model.Duration(rng))
		} else {
			note = fmt.Sprintf("prometheus: rates over the last %s, the age of the oldest series (younger than --range %s; each series' rates cover its own life)",
				model.Duration(w), model.Duration(rng))
		}
		if _, ok := hosts[note]; !ok {
			order = append(order, note)
		}
		hosts[note] = append(hosts[note], a.URL)
	}
	out := make([]string, 0, len(order))
	for _, n := range order {
		out = append(out, n+": "+strings.Join(hosts[n], ", "))
	}
	return out
}
