package exporter

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// conns caps the connections a server holds open. At the cap a new
// connection is admitted by closing the one that has waited longest
// without a request in progress (idle in keep-alive, or accepted and
// not yet sent a request): blocking new connections until an idle one
// times out, as a plain limiting listener does, would let idle clients
// lock Prometheus out. Only when every connection is serving a request
// (each bounded by the server's timeouts) does Accept wait.
type conns struct {
	log zerolog.Logger
	now func() time.Time
	// size, when set, is the cap for the connections open now; it is
	// asked again at most once a second (sizeEvery). Else max is fixed.
	size func(open int) int

	mu   sync.Mutex
	max  int
	cond *sync.Cond // signalled when a connection closes or becomes evictable
	// open holds every admitted connection; its element is in waiting
	// while it has no request in progress, nil while it serves one.
	open    map[net.Conn]*list.Element
	waiting list.List // of net.Conn, longest-waiting first
	closed  bool
	sized   time.Time // when size was last asked
	evicted uint64
	// logged is when evictions were last logged and loggedEvicted the
	// count then: a line says how many were closed since the last one.
	logged        time.Time
	loggedEvicted uint64
}

// sizeEvery is how often a sized cap is recomputed: often enough to
// follow the live heap as targets come, rarely enough to cost nothing.
const sizeEvery = time.Second

func newConns(max int, log zerolog.Logger) *conns {
	c := &conns{max: max, log: log, now: time.Now, open: map[net.Conn]*list.Element{}}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// listener wraps ln so that what it accepts is admitted by c.
func (c *conns) listener(ln net.Listener) net.Listener { return &capListener{ln, c} }

type capListener struct {
	net.Listener
	c *conns
}

func (l *capListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := l.c.admit(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

func (l *capListener) Close() error {
	l.c.close()
	return l.Listener.Close()
}

// admit registers nc, first making room at the cap: when the cap has
// shrunk (the live heap grew) it closes as many idle connections as it
// takes to get under it.
func (c *conns) admit(nc net.Conn) error {
	c.mu.Lock()
	if c.size != nil && c.now().Sub(c.sized) >= sizeEvery {
		c.sized = c.now()
		c.max = max(1, c.size(len(c.open)))
	}
	var victims []net.Conn
	for len(c.open) >= c.max && !c.closed {
		if e := c.waiting.Front(); e != nil {
			victims = append(victims, c.forget(e.Value.(net.Conn)))
			c.evicted++
			continue
		}
		c.cond.Wait()
	}
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.open[nc] = c.waiting.PushBack(nc)
	if len(victims) > 0 {
		c.logEvictions()
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.Close()
	}
	return nil
}

// logEvictions says, at most once a minute and only after an eviction,
// that the cap is being hit, with the evictions since its last line.
// Must be called with c.mu held.
func (c *conns) logEvictions() {
	now := c.now()
	if !c.logged.IsZero() && now.Sub(c.logged) < time.Minute {
		return
	}
	c.log.Warn().Int("max", c.max).Uint64("closed", c.evicted-c.loggedEvicted).Uint64("closed_total", c.evicted).
		Msg("HTTP connection cap reached: closing the longest-idle connections to admit new ones")
	c.logged, c.loggedEvicted = now, c.evicted
}

// stats is the connections open now, the cap and the evictions so far.
func (c *conns) stats() (open, max int, evicted uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open), c.max, c.evicted
}

// forget drops nc from the books and returns it. Must be called with c.mu held.
func (c *conns) forget(nc net.Conn) net.Conn {
	if e := c.open[nc]; e != nil {
		c.waiting.Remove(e)
	}
	delete(c.open, nc)
	c.cond.Signal()
	return nc
}

// state is the server's ConnState hook.
func (c *conns) state(nc net.Conn, s http.ConnState) {
	// With TLS the server sees the tls.Conn around what was accepted.
	if w, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = w.NetConn()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.open[nc]
	if !ok {
		return // evicted, or never admitted
	}
	switch s {
	case http.StateActive:
		if e != nil {
			c.waiting.Remove(e)
			c.open[nc] = nil
		}
	case http.StateIdle:
		if e != nil {
			c.waiting.Remove(e)
		}
		c.open[nc] = c.waiting.PushBack(nc)
		c.cond.Signal()
	case http.StateClosed, http.StateHijacked:
		c.forget(nc)
	}
}

func (c *conns) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// idle is the connections open without a request in progress.
func (c *conns) idle() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting.Len()
}
