package libvirt

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	lv "github.com/digitalocean/go-libvirt"
)

// DefaultSocket is libvirtd's read-write socket for qemu:///system.
const DefaultSocket = "/run/libvirt/libvirt-sock"

// DefaultURI is used when NewWatcher (or Socket) gets an empty URI.
const DefaultURI = "qemu:///system"

// ErrUnsupportedURI is returned (wrapped) for URIs this package cannot dial.
var ErrUnsupportedURI = errors.New("unsupported libvirt URI")

// target is where a URI points: a local socket and the driver to open on it.
type target struct {
	uri    string // as given, for messages
	socket string
	driver lv.ConnectURI
}

// Socket returns the local socket of libvirtd that uri names:
// qemu:///system (DefaultSocket), qemu+unix:///system?socket=PATH, or a
// socket path; "" is DefaultURI. Any other URI is ErrUnsupportedURI: this
// package talks to the local system instance only. The experiments' libvirt
// backend takes the same URIs through it.
func Socket(uri string) (string, error) {
	t, err := parseURI(uri)
	return t.socket, err
}

func parseURI(uri string) (target, error) {
	if uri == "" {
		uri = DefaultURI
	}
	t := target{uri: uri, socket: DefaultSocket, driver: lv.QEMUSystem}
	if filepath.IsAbs(uri) {
		t.socket = filepath.Clean(uri)
		return t, nil
	}
	u, err := url.Parse(uri)
	if err != nil {
		return target{}, fmt.Errorf("%w %q: %v", ErrUnsupportedURI, uri, err)
	}
	if (u.Scheme != "qemu" && u.Scheme != "qemu+unix") || u.Host != "" || u.Path != "/system" {
		return target{}, fmt.Errorf("%w %q: want qemu:///system, qemu+unix:///system?socket=PATH or a socket path", ErrUnsupportedURI, uri)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return target{}, fmt.Errorf("%w %q: %v", ErrUnsupportedURI, uri, err)
	}
	for k := range q {
		if k != "socket" {
			return target{}, fmt.Errorf("%w %q: parameter %q is not supported (only socket=)", ErrUnsupportedURI, uri, k)
		}
	}
	if s := q.Get("socket"); s != "" {
		if !filepath.IsAbs(s) {
			return target{}, fmt.Errorf("%w %q: socket %q is not an absolute path", ErrUnsupportedURI, uri, s)
		}
		t.socket = filepath.Clean(s)
	}
	return t, nil
}

// dialer is a socket.Dialer that remembers the connection it made, so a
// connection whose peer stops answering can be closed from outside: go-libvirt
// has no timeouts of its own and would wait for a reply forever.
type dialer struct {
	socket  string
	timeout time.Duration

	mu     sync.Mutex
	conn   net.Conn // the connection made; guarded by mu
	killed bool     // kill was called; guarded by mu
}

func (d *dialer) Dial() (net.Conn, error) {
	c, err := net.DialTimeout("unix", d.socket, d.timeout)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.killed {
		// kill ran while we dialled: it had nothing to close yet.
		c.Close()
		return nil, errors.New("connection timed out")
	}
	d.conn = c
	return c, nil
}

// kill closes the connection without talking to libvirtd. go-libvirt's read
// loop then fails, and every call waiting for a reply returns an error.
func (d *dialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.killed = true
	if d.conn != nil {
		d.conn.Close()
	}
}

// conn is one connection to libvirtd. A fresh go-libvirt client is made per
// connection rather than re-connecting one: its Disconnected channel is
// replaced on every connect, which would race with readers of the old one.
type conn struct {
	l *lv.Libvirt
	d *dialer
	// hostCPUs is the number of host CPUs libvirt reports (for pin maps).
	hostCPUs int
	// online is the set of online host CPUs.
	online []int
}

// dial connects to t and opens its driver. The whole handshake is bounded
// by timeout: a socket that accepts but never answers gives an error too.
func dial(t target, timeout time.Duration) (*conn, error) {
	d := &dialer{socket: t.socket, timeout: timeout}
	l := lv.NewWithDialer(d)
	// Killing the connection fails whichever call is waiting for a reply.
	timer := time.AfterFunc(timeout, d.kill)
	c := &conn{l: l, d: d}
	err := l.ConnectToURI(t.driver)
	if err == nil {
		err = c.readHostCPUs()
		if err != nil {
			c.close()
		}
	}
	if !timer.Stop() {
		if err == nil {
			c.close()
		}
		return nil, fmt.Errorf("connect to libvirt %s (socket %s): no answer within %s", t.uri, t.socket, timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to libvirt %s (socket %s): %w", t.uri, t.socket, err)
	}
	return c, nil
}

func (c *conn) readHostCPUs() error {
	cpumap, _, n, err := c.l.NodeGetCPUMap(1, 1, 0)
	if err != nil {
		return fmt.Errorf("read host cpu map: %w", err)
	}
	if n <= 0 {
		return fmt.Errorf("read host cpu map: libvirt reports %d cpus", n)
	}
	c.hostCPUs = int(n)
	c.online = bitmapCPUs(cpumap, int(n))
	return nil
}

// close says goodbye to libvirtd, or just drops the connection when the
// daemon does not answer within a second (it may be the reason we close).
func (c *conn) close() {
	done := make(chan struct{})
	go func() {
		c.l.Disconnect()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		c.d.kill()
		<-done
	}
}

// callTimeout bounds one round of calls (listing, or describing a domain).
// go-libvirt has no keepalive and no per-call timeout: a libvirtd that is
// alive but stuck (stopped, deadlocked) would block the watcher forever.
const callTimeout = 60 * time.Second

// guard runs f; if it takes longer than callTimeout the connection is
// dropped, which fails f's pending call and makes the watcher reconnect.
func (c *conn) guard(f func()) {
	t := time.AfterFunc(callTimeout, c.d.kill)
	defer t.Stop()
	f()
}
