package exporter

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Timeouts of the agent's HTTP server: every connection and request ends
// within bounded time whatever the client does.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	// writeTimeout allows a full timeline page over a slow link.
	writeTimeout = 60 * time.Second
	// idleTimeout outlives the usual 15-60 s scrape interval, so that
	// Prometheus keeps one connection.
	idleTimeout    = 90 * time.Second
	maxHeaderBytes = 16 << 10
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// WebConfigFile is the exporter-toolkit web config (TLS, basic
	// auth); "" serves plain HTTP.
	WebConfigFile string
	// MaxConns caps open connections; 0 sizes it from the file and
	// memory limits (ConnCap).
	MaxConns int
	Log      zerolog.Logger
	// seeConns, in tests, is given the server's connection books.
	seeConns func(*conns)
}

// ValidateWebConfig checks a web config file the way Serve will load it:
// YAML, bcrypt hashes, certificate and key files. The error is one line.
func ValidateWebConfig(path string) error {
	if err := web.Validate(path); err != nil {
		return errors.New(strings.Join(strings.Fields(err.Error()), " "))
	}
	return nil
}

// fdReserve is the file descriptors ConnCap leaves for the rest of the
// agent: eBPF programs, maps, links and ring buffer, perf events, the
// libvirt socket, /proc and cgroup files read on each sample.
const fdReserve = 1024

// connBytes is what one open connection may cost, user and kernel side
// (goroutine stack, buffers, socket): twice what an idle keep-alive
// connection costs as make bench-agent-http measures it (docs/agent.md).
const connBytes = 40 << 10

// connHeapBytes is the part of an idle connection's cost that is on the
// Go heap (the server's conn and its read and write buffers): the live
// heap less this much per open connection is the rest of the agent's.
const connHeapBytes = 12 << 10

// ConnCap is the connection cap for a file limit of nofile and a memory
// limit of mem bytes (0: none) before the agent holds anything: nofile
// less fdReserve (at most half of it on a small limit), and no more
// connections than fit in half of mem.
func ConnCap(nofile, mem uint64) int { return connCap(nofile, mem, 0, 0) }

// connCap is the cap with a live heap of live bytes of which open
// connections hold their share: connections get half of the memory
// limit less the rest of the agent's live heap (the targets' counters,
// timeline rings, caches), at least 16 of them. 202 targets hold 40-105
// MB of live heap; a cap over the limit alone let the connections and
// the targets together reach the limit.
func connCap(nofile, mem, live uint64, open int) int {
	n := nofile - min(nofile/2, fdReserve)
	if mem > 0 {
		others := live - min(live, uint64(open)*connHeapBytes)
		room := mem/2 - min(mem/2, others)
		n = min(n, max(room/connBytes, 16))
	}
	return int(n)
}

// goMemLimit is the Go runtime's soft memory limit for a cgroup memory
// limit of mem bytes: half of it, the same half the connection cap shares
// out between the connections and the rest of the live heap. The other
// half is for what the runtime does not count (socket buffers of 20,000
// connections, eBPF maps charged to the cgroup, page tables) and for the
// runtime's own overshoot: at three quarters, 202 targets, 20,000
// connections, timeline readers and scrapers peaked at 209 MiB of a 256
// MiB cgroup (make bench-agent-http BENCH=memory). 0: no limit.
func goMemLimit(mem uint64) int64 {
	if mem == 0 {
		return 0
	}
	return int64(mem / 2)
}

// limitMemory sets the Go runtime's memory limit from this process's
// cgroup memory limit (goMemLimit), unless GOMEMLIMIT is set in the
// environment; it returns the limit it found (0: none).
func limitMemory(log zerolog.Logger) uint64 {
	mem := memoryLimit()
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info().Str("GOMEMLIMIT", env).Uint64("memory_limit", mem).Msg("Go memory limit from the environment")
		return mem
	}
	if l := goMemLimit(mem); l > 0 {
		debug.SetMemoryLimit(l)
		log.Info().Uint64("memory_limit", mem).Int64("go_memory_limit", l).Msg("Go memory limit from the cgroup's")
	}
	return mem
}

// liveHeap is the heap the last garbage collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// fileLimit is the process's RLIMIT_NOFILE (Go raises the soft limit to
// the hard one at start).
func fileLimit() (uint64, error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("reading the file limit: %w", err)
	}
	return r.Cur, nil
}

// Serve serves h on ln until ctx ends, with the server's timeouts, the
// connection cap and the web config's TLS and basic auth.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, o ServeOptions) error {
	cs := newConns(o.MaxConns, o.Log)
	if o.MaxConns <= 0 {
		n, err := fileLimit()
		if err != nil {
			return err
		}
		mem := limitMemory(o.Log)
		cs.max = ConnCap(n, mem)
		cs.size = func(open int) int { return connCap(n, mem, liveHeap(), open) }
		o.Log.Info().Uint64("file_limit", n).Uint64("memory_limit", mem).Int("max_connections", cs.max).
			Msg("HTTP connection cap from the file and memory limits, less the live heap as it grows")
	}
	stats := &serverStats{} // a handler that is not ours: counted, not exported
	if hh, ok := h.(*Handler); ok {
		stats = hh.stats
	}
	stats.attach(cs)
	if o.seeConns != nil {
		o.seeConns(cs)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         cs.state,
		ErrorLog:          log.New(newLogWriter(o.Log, stats), "", 0),
	}
	flags := &web.FlagConfig{
		WebListenAddresses: &[]string{ln.Addr().String()},
		WebSystemdSocket:   new(bool),
		WebConfigFile:      &o.WebConfigFile,
	}
	errc := make(chan error, 1)
	go func() { errc <- web.Serve(cs.listener(ln), srv, flags, newSlogLogger(o.Log)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down HTTP server: %w", err)
	}
	return nil
}

// logWriter takes net/http's error log into zerolog. A failed TLS
// handshake is the client's problem (no CA, a port scanner, a health
// check that speaks plain HTTP): counted, and logged at debug. The rest
// (accept errors) repeat while their cause lasts: one line a minute.
type logWriter struct {
	log   zerolog.Logger
	stats *serverStats
	lim   *limitedLog
}

func newLogWriter(l zerolog.Logger, stats *serverStats) logWriter {
	return logWriter{log: l, stats: stats, lim: newLimitedLog(l, time.Minute)}
}

func (w logWriter) Write(b []byte) (int, error) {
	msg := strings.TrimSpace(string(b))
	if strings.Contains(msg, "TLS handshake error") {
		w.stats.tlsErrors.Add(1)
		w.log.Debug().Msg(msg)
		return len(b), nil
	}
	if ev := w.lim.event(logKey(msg), zerolog.WarnLevel); ev != nil {
		ev.Msg(msg)
	}
	return len(b), nil
}

// logKey is a message up to its first digit: "http: Accept error: accept
// tcp " for every address and errno text that follows.
func logKey(msg string) string {
	if i := strings.IndexAny(msg, "0123456789"); i >= 0 {
		return msg[:i]
	}
	return msg
}
