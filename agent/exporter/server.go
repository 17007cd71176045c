package exporter

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
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
// (goroutine stack, buffers, socket): measured ~20 KiB for an idle
// keep-alive connection (make bench-agent-http), doubled for headroom.
// Connections get at most half of a memory limit.
const connBytes = 40 << 10

// ConnCap is the connection cap for a file limit of nofile and a memory
// limit of mem bytes (0: none): nofile less fdReserve (at most half of
// it on a small limit), and no more connections than fit in half of mem.
func ConnCap(nofile, mem uint64) int {
	n := nofile - min(nofile/2, fdReserve)
	if mem > 0 {
		n = min(n, max(mem/2/connBytes, 16))
	}
	return int(n)
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
	if o.MaxConns <= 0 {
		n, err := fileLimit()
		if err != nil {
			return err
		}
		mem := memoryLimit()
		o.MaxConns = ConnCap(n, mem)
		o.Log.Info().Uint64("file_limit", n).Uint64("memory_limit", mem).Msg("HTTP connection cap from the file and memory limits")
	}
	cs := newConns(o.MaxConns, o.Log)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         cs.state,
		ErrorLog:          log.New(logWriter{o.Log}, "", 0),
	}
	flags := &web.FlagConfig{
		WebListenAddresses: &[]string{ln.Addr().String()},
		WebSystemdSocket:   new(bool),
		WebConfigFile:      &o.WebConfigFile,
	}
	o.Log.Info().Int("max_connections", o.MaxConns).Msg("HTTP connection cap")
	errc := make(chan error, 1)
	go func() { errc <- web.Serve(cs.listener(ln), srv, flags, NewSlogLogger(o.Log)) }()
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

// logWriter takes net/http's error log (accept errors, TLS handshakes
// that failed) into zerolog.
type logWriter struct{ log zerolog.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimSpace(string(b)))
	return len(b), nil
}
