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
	max int
	log zerolog.Logger

	mu   sync.Mutex
	cond *sync.Cond // signalled when a connection closes or becomes evictable
	// open holds every admitted connection; its element is in waiting
	// while it has no request in progress, nil while it serves one.
	open    map[net.Conn]*list.Element
	waiting list.List // of net.Conn, longest-waiting first
	closed  bool
	evicted uint64
	logged  time.Time // last log of evictions
}

func newConns(max int, log zerolog.Logger) *conns {
	c := &conns{max: max, log: log, open: map[net.Conn]*list.Element{}}
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

// admit registers nc, first making room at the cap.
func (c *conns) admit(nc net.Conn) error {
	c.mu.Lock()
	var victim net.Conn
	for len(c.open) >= c.max && !c.closed {
		if e := c.waiting.Front(); e != nil {
			victim = c.forget(e.Value.(net.Conn))
			c.evicted++
			break
		}
		c.cond.Wait()
	}
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.open[nc] = c.waiting.PushBack(nc)
	c.logEvictions()
	c.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return nil
}

// logEvictions says, at most once a minute, that the cap is being hit.
// Must be called with c.mu held.
func (c *conns) logEvictions() {
	if c.evicted == 0 || time.Since(c.logged) < time.Minute {
		return
	}
	c.logged = time.Now()
	c.log.Warn().Int("max", c.max).Uint64("closed_total", c.evicted).
		Msg("HTTP connection cap reached: closing the longest-idle connections to admit new ones")
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

// count is the connections open now.
func (c *conns) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}
