package libvirt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/rs/zerolog"
)

// EventKind says what happened to a domain.
type EventKind int

const (
	// Added: the domain runs and its vCPU threads can be watched. Sent again
	// for a domain already added when its description changes in place.
	Added EventKind = iota
	// Removed: the domain stopped (or restarted: a Removed for the old run
	// comes before the Added for the new one). Its threads are gone.
	Removed
)

func (k EventKind) String() string {
	switch k {
	case Added:
		return "added"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one change in the set of running domains.
type Event struct {
	Kind   EventKind
	Domain Domain
}

// Defaults for Options.
const (
	DefaultTimeout    = 5 * time.Second
	DefaultMaxBackoff = 10 * time.Second
	DefaultRefresh    = 30 * time.Second
	minBackoff        = 100 * time.Millisecond
)

// Option changes a Watcher's defaults.
type Option func(*Watcher)

// withTimeout bounds connecting to libvirtd (dial and handshake).
func withTimeout(d time.Duration) Option {
	return func(w *Watcher) {
		if d > 0 {
			w.timeout = d
		}
	}
}

// withRefresh sets how often the domains are listed again to pick up live
// changes of pinning and bandwidth (default DefaultRefresh).
func withRefresh(d time.Duration) Option {
	return func(w *Watcher) {
		if d > 0 {
			w.refresh = d
		}
	}
}

// withMaxBackoff caps the wait between reconnect attempts.
func withMaxBackoff(d time.Duration) Option {
	return func(w *Watcher) {
		if d > 0 {
			w.maxBackoff = d
		}
	}
}

// Watcher follows the running domains of one libvirtd.
type Watcher struct {
	target     target
	log        zerolog.Logger
	timeout    time.Duration
	maxBackoff time.Duration
	refresh    time.Duration

	synced     chan struct{} // closed after the first listing was sent
	syncedOnce sync.Once

	mu      sync.Mutex
	first   *conn             // the connection NewWatcher made, taken by Run; guarded by mu
	running bool              // Run was called; guarded by mu
	domains map[string]Domain // by UUID, as last sent on the channel; guarded by mu
}

// NewWatcher connects to the libvirtd at uri once, so a wrong or dead URI is
// reported here, within the timeout, rather than retried forever by Run.
func NewWatcher(uri string, log zerolog.Logger, opts ...Option) (*Watcher, error) {
	t, err := parseURI(uri)
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		target:     t,
		log:        log.With().Str("libvirt", t.uri).Logger(),
		timeout:    DefaultTimeout,
		maxBackoff: DefaultMaxBackoff,
		refresh:    DefaultRefresh,
		domains:    map[string]Domain{},
		synced:     make(chan struct{}),
	}
	for _, o := range opts {
		o(w)
	}
	c, err := dial(t, w.timeout)
	if err != nil {
		return nil, err
	}
	w.first = c
	return w, nil
}

// Close releases the connection NewWatcher made if Run was never called.
// After Run, cancel its context instead.
func (w *Watcher) Close() {
	w.mu.Lock()
	c := w.first
	w.first = nil
	w.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// Domains returns the running domains as last reported on Run's channel,
// sorted by name.
func (w *Watcher) Domains() []Domain {
	w.mu.Lock()
	out := make([]Domain, 0, len(w.domains))
	for _, d := range w.domains {
		out = append(out, d.clone())
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b Domain) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Synced is closed once the domains running when Run started have been
// listed and sent (and so are in Domains), except those that could not be
// described yet.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Run starts following domains and returns their events: Added for every
// running domain first, then changes as they happen. It reconnects on its
// own when libvirtd goes away. The channel is closed when ctx is done. Run
// may be called once; a second call returns a closed channel.
func (w *Watcher) Run(ctx context.Context) <-chan Event {
	out := make(chan Event, 16)
	w.mu.Lock()
	again := w.running
	w.running = true
	c := w.first
	w.first = nil
	w.mu.Unlock()
	if again {
		w.log.Error().Msg("libvirt watcher: Run called twice")
		close(out)
		return out
	}
	go w.loop(ctx, c, out)
	return out
}

func (w *Watcher) loop(ctx context.Context, c *conn, out chan<- Event) {
	defer close(out)
	// backoff grows while sessions fail soon after connecting (a daemon
	// that accepts and then fails every listing), so that does not spin.
	backoff := minBackoff
	for {
		if c == nil {
			if c = w.redial(ctx, backoff); c == nil {
				return // ctx done
			}
			w.log.Info().Msg("reconnected to libvirtd")
		}
		start := time.Now()
		err := w.session(ctx, c, out)
		c.close()
		c = nil
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) < stableSession {
			backoff = min(2*backoff, w.maxBackoff)
		} else {
			backoff = minBackoff
		}
		w.log.Warn().Err(err).Msg("lost libvirtd; reconnecting")
	}
}

// stableSession is how long a session must last for the reconnect backoff
// to start again from minBackoff.
const stableSession = 10 * time.Second

// redial dials until it succeeds, waiting first for backoff and then
// doubling it up to maxBackoff. It returns nil when ctx is done.
func (w *Watcher) redial(ctx context.Context, backoff time.Duration) *conn {
	for attempt := 1; ; attempt++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		c, err := dial(w.target, w.timeout)
		if err == nil {
			return c
		}
		// Debug: while libvirtd restarts, every attempt fails the same way.
		w.log.Debug().Err(err).Int("attempt", attempt).Msg("reconnect to libvirtd failed")
		backoff = min(2*backoff, w.maxBackoff)
	}
}

var errDisconnected = errors.New("connection to libvirtd closed")

// session follows one connection until it drops or ctx is done.
func (w *Watcher) session(ctx context.Context, c *conn, out chan<- Event) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Subscribe before listing, so a domain that starts or stops while we
	// list is not missed: its event waits in the channel.
	var lifecycle <-chan lv.DomainEventLifecycleMsg
	var err error
	c.guard(func() { lifecycle, err = c.l.LifecycleEvents(sctx) })
	if err != nil {
		return fmt.Errorf("subscribe to lifecycle events: %w", err)
	}
	// go-libvirt's event goroutines block sending until read; drain them so
	// they can exit once sctx is cancelled and the connection is closed.
	defer func() { go drain(lifecycle) }()

	// A listed domain that cannot be described yet (libvirtd, just
	// restarted, may still be reconnecting to its QEMU) is listed again
	// later, with backoff, until every listed domain could be described.
	var retry <-chan time.Time
	retryAfter := minBackoff
	resync := func() error {
		pending, err := w.resync(sctx, c, out)
		if err != nil {
			return err
		}
		retry = nil
		if pending {
			retry = time.After(retryAfter)
			retryAfter = min(2*retryAfter, w.maxBackoff)
		} else {
			retryAfter = minBackoff
		}
		return nil
	}
	if err := resync(); err != nil {
		return err
	}
	w.syncedOnce.Do(func() { close(w.synced) })
	// Live pinning and bandwidth changes come as libvirt "tunable" events,
	// but go-libvirt drops them (its event decoder cannot decode their typed
	// parameters), so list again now and then instead.
	refresh := time.NewTicker(w.refresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-retry:
			if err := resync(); err != nil {
				return err
			}
		case <-c.l.Disconnected():
			return errDisconnected
		case ev, ok := <-lifecycle:
			if !ok {
				return fmt.Errorf("lifecycle events: %w", errDisconnected)
			}
			if !w.lifecycle(sctx, c, ev, out) && retry == nil {
				retry = time.After(retryAfter)
			}
		case <-refresh.C:
			if err := resync(); err != nil {
				return err
			}
		}
	}
}

func drain[T any](ch <-chan T) {
	for range ch {
	}
}

// resync lists the running domains and brings w.domains (and the consumer)
// in line: Removed for domains gone or restarted, Added for new or changed
// ones. pending is true when a listed domain could not be described; a known
// one then keeps its last description, a new one is left for the next try.
func (w *Watcher) resync(ctx context.Context, c *conn, out chan<- Event) (pending bool, err error) {
	var doms []lv.Domain
	c.guard(func() { doms, _, err = c.l.ConnectListAllDomains(1, lv.ConnectListDomainsActive) })
	if err != nil {
		return false, fmt.Errorf("list domains: %w", err)
	}
	w.mu.Lock()
	known := make(map[string]Domain, len(w.domains))
	for k, v := range w.domains {
		known[k] = v
	}
	w.mu.Unlock()

	current := map[string]Domain{}
	for _, dom := range doms {
		d, err := c.describe(dom)
		if err != nil {
			if !c.l.IsConnected() {
				return false, fmt.Errorf("list domains: %w", err)
			}
			w.log.Warn().Err(err).Str("domain", dom.Name).Msg("cannot describe domain yet; will list again")
			pending = true
			if old, ok := known[formatUUID(dom.UUID)]; ok {
				current[old.UUID] = old
			}
			continue
		}
		current[d.UUID] = d
	}

	var gone, added []Domain
	for uuid, old := range known {
		if d, ok := current[uuid]; !ok || !sameRun(old, d) {
			gone = append(gone, old)
		}
	}
	for uuid, d := range current {
		if old, ok := known[uuid]; !ok || !equal(old, d) {
			added = append(added, d)
		}
	}
	byName := func(a, b Domain) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(gone, byName)
	slices.SortFunc(added, byName)
	for _, d := range gone {
		if !w.emit(ctx, out, Event{Kind: Removed, Domain: d}) {
			return false, ctx.Err()
		}
	}
	for _, d := range added {
		if !w.emit(ctx, out, Event{Kind: Added, Domain: d}) {
			return false, ctx.Err()
		}
	}
	return pending, nil
}

// lifecycle handles one lifecycle event. It returns false when a started
// domain could not be described, so the caller lists domains again later.
func (w *Watcher) lifecycle(ctx context.Context, c *conn, ev lv.DomainEventLifecycleMsg, out chan<- Event) bool {
	uuid := formatUUID(ev.Dom.UUID)
	log := w.log.With().Str("domain", ev.Dom.Name).Int32("event", ev.Event).Int32("detail", ev.Detail).Logger()
	switch lv.DomainEventType(ev.Event) {
	case lv.DomainEventStarted:
		d, err := c.describe(ev.Dom)
		if err != nil {
			// Stopped again already, or its monitor is busy: list again later.
			log.Warn().Err(err).Msg("cannot describe started domain yet; will list again")
			return false
		}
		w.mu.Lock()
		old, known := w.domains[uuid]
		w.mu.Unlock()
		if known && sameRun(old, d) {
			return true // already reported by the list that raced with this event
		}
		if known && !w.emit(ctx, out, Event{Kind: Removed, Domain: old}) {
			return true
		}
		log.Debug().Msg("domain started")
		w.emit(ctx, out, Event{Kind: Added, Domain: d})
	case lv.DomainEventStopped:
		w.mu.Lock()
		old, known := w.domains[uuid]
		w.mu.Unlock()
		if known {
			log.Debug().Msg("domain stopped")
			w.emit(ctx, out, Event{Kind: Removed, Domain: old})
		}
	}
	// Other events (suspended, resumed, shutdown requested, crashed, pm
	// suspend) leave the QEMU process and its vCPU threads in place.
	return true
}

// emit records the event in w.domains and sends it. It returns false when
// ctx ended first; the record is then still updated, so Domains() reflects
// libvirt even when nobody reads the channel any more.
func (w *Watcher) emit(ctx context.Context, out chan<- Event, ev Event) bool {
	w.mu.Lock()
	switch ev.Kind {
	case Added:
		w.domains[ev.Domain.UUID] = ev.Domain.clone()
	case Removed:
		delete(w.domains, ev.Domain.UUID)
	}
	w.mu.Unlock()
	w.log.Info().Stringer("kind", ev.Kind).Str("domain", ev.Domain.Name).Int("vcpus", len(ev.Domain.VCPUs)).Msg("domain event")
	select {
	case out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}
