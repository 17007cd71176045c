package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestHTTPServerMetrics: /metrics says how many requests are in flight,
// how many connections are open, the cap, and how many were evicted.
func TestHTTPServerMetrics(t *testing.T) {
	addr := serveTest(t, ServeOptions{MaxConns: 2, Log: zerolog.Nop()})
	for range 3 { // the third evicts the first
		c := dial(t, addr)
		if code, err := c.get("/"); err != nil || code != 200 {
			t.Fatalf("GET /: %d %v", code, err)
		}
	}
	time.Sleep(MetricsMaxAge) // a collection younger than that would be served again
	c := dial(t, addr)        // evicts the second
	body := readBody(t, c, "/metrics")
	for _, line := range []string{
		"vgpu_probe_http_requests_in_flight 1", // this one
		"vgpu_probe_http_connections_open 2",
		"vgpu_probe_http_connections_max 2",
		"vgpu_probe_http_connections_evicted_total 2",
		"vgpu_probe_http_tls_handshake_errors_total 0",
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", line, grepLines(body, "vgpu_probe_http_"))
		}
	}
}

func readBody(t *testing.T, c *rawConn, path string) string {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: agent\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// fakeClock is a settable now.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

// pipeConn is a connection that is only a key in conns' books.
func pipeConn(t *testing.T) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}

// TestEvictionLogOnlyAfterEvictions: the cap's warning says how many
// connections were closed since its last line, and a quiet minute with
// no eviction writes nothing (it used to repeat the stale total).
func TestEvictionLogOnlyAfterEvictions(t *testing.T) {
	var out bytes.Buffer
	clk := &fakeClock{time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	c := newConns(2, zerolog.New(&out))
	c.now = clk.now
	admit := func() net.Conn {
		nc := pipeConn(t)
		if err := c.admit(nc); err != nil {
			t.Fatal(err)
		}
		return nc
	}
	admit()
	admit()
	admit() // evicts one
	if n := strings.Count(out.String(), "\n"); n != 1 || !strings.Contains(out.String(), `"closed":1`) {
		t.Fatalf("after one eviction: %q", out.String())
	}
	admit() // evicts another, within the minute: counted, not logged
	clk.t = clk.t.Add(2 * time.Minute)
	last := admit() // evicts a third after the quiet minute: one line, 2 since the last
	if n := strings.Count(out.String(), "\n"); n != 2 || !strings.Contains(out.String(), `"closed":2,"closed_total":3`) {
		t.Fatalf("after three evictions: %q", out.String())
	}
	// A connection closes; the next is admitted under the cap a minute
	// later: nothing was evicted, nothing is logged.
	c.state(last, http.StateClosed)
	clk.t = clk.t.Add(2 * time.Minute)
	admit()
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("a quiet admission logged: %q", out.String())
	}
	if open, _, ev := c.stats(); open != 2 || ev != 3 {
		t.Errorf("stats: %d open, %d evicted; want 2, 3", open, ev)
	}
}

// TestCapFollowsLiveHeap: the cap is asked again as connections come,
// and when the live heap grows it shrinks, closing idle connections to
// get under it.
func TestCapFollowsLiveHeap(t *testing.T) {
	clk := &fakeClock{time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	c := newConns(100, zerolog.Nop())
	c.now = clk.now
	capNow := 100
	c.size = func(int) int { return capNow }
	for range 10 {
		if err := c.admit(pipeConn(t)); err != nil {
			t.Fatal(err)
		}
	}
	capNow = 4 // the targets' heap grew
	clk.t = clk.t.Add(sizeEvery)
	if err := c.admit(pipeConn(t)); err != nil {
		t.Fatal(err)
	}
	if open, max, ev := c.stats(); open != 4 || max != 4 || ev != 7 {
		t.Errorf("after the cap fell to 4: %d open, cap %d, %d evicted; want 4, 4, 7", open, max, ev)
	}
}

func TestConnCapCountsLiveHeap(t *testing.T) {
	const mem = 256 << 20
	for _, tt := range []struct {
		live uint64
		open int
		want int
	}{
		{0, 0, 3276},                       // half of 256 MiB in 40 KiB connections
		{64 << 20, 0, 1638},                // targets hold 64 MiB: half as many
		{64<<20 + 1000*12<<10, 1000, 1638}, // the connections' own heap is not counted twice
		{200 << 20, 0, 16},                 // the targets hold more than half: the floor
	} {
		if got := connCap(20000, mem, tt.live, tt.open); got != tt.want {
			t.Errorf("connCap(live %d MiB, %d open) = %d, want %d", tt.live>>20, tt.open, got, tt.want)
		}
	}
	if got := connCap(20000, 0, 1<<30, 0); got != 18976 {
		t.Errorf("no memory limit: %d, want the file limit's 18976", got)
	}
}

func TestGoMemLimit(t *testing.T) {
	if got := goMemLimit(256 << 20); got != 128<<20 {
		t.Errorf("goMemLimit(256 MiB) = %d MiB, want 128", got>>20)
	}
	if got := goMemLimit(0); got != 0 {
		t.Errorf("goMemLimit(no limit) = %d", got)
	}
}

// TestLimitMemoryInCgroup runs this test binary in a real memory cgroup
// of 256 MiB: limitMemory finds the limit and sets the Go runtime's to
// half of it; GOMEMLIMIT in the environment wins.
func TestLimitMemoryInCgroup(t *testing.T) {
	if os.Getenv("VGPU_LIMIT_MEMORY_CHILD") == "1" {
		mem := limitMemory(zerolog.Nop())
		fmt.Printf("%d %d\n", mem, debug.SetMemoryLimit(-1))
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a memory cgroup")
	}
	name := fmt.Sprintf("vgpu-probe-memlimit-%d", os.Getpid())
	dir, file := filepath.Join(cgroupRoot, name), "memory.max" // v2
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
		_ = os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+memory"), 0)
	} else if _, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.limit_in_bytes")); err == nil {
		dir, file = filepath.Join(cgroupRoot, "memory", name), "memory.limit_in_bytes" // v1
	} else {
		t.Skip("no cgroup memory controller (v2 unified or v1 memory)")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(256<<20)), 0); err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) string {
		cmd := exec.Command("sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", filepath.Join(dir, "cgroup.procs"),
			os.Args[0], "-test.run=^TestLimitMemoryInCgroup$")
		cmd.Env = append(os.Environ(), append(env, "VGPU_LIMIT_MEMORY_CHILD=1")...)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("child: %v\n%s", err, ee.Stderr)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		return first
	}
	if got, want := run(), fmt.Sprintf("%d %d", 256<<20, 128<<20); got != want {
		t.Errorf("in a 256 MiB cgroup: limit and Go limit %s, want %s", got, want)
	}
	if got, want := run("GOMEMLIMIT=100MiB"), fmt.Sprintf("%d %d", 256<<20, 100<<20); got != want {
		t.Errorf("with GOMEMLIMIT=100MiB: %s, want %s", got, want)
	}
}

// TestServerLogLevels: a failed TLS handshake is counted and logged at
// debug; another server error repeating is one warning a minute.
func TestServerLogLevels(t *testing.T) {
	var out bytes.Buffer
	stats := &serverStats{}
	w := newLogWriter(zerolog.New(&out).Level(zerolog.InfoLevel), stats)
	clk := &fakeClock{time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	w.lim.now = clk.now
	for i := range 5 {
		fmt.Fprintf(w, "http: TLS handshake error from 127.0.0.1:%d: remote error: tls: bad certificate\n", 40000+i)
	}
	if out.Len() != 0 || stats.tlsErrors.Load() != 5 {
		t.Errorf("TLS handshake errors: logged %q, counted %d; want nothing at info, 5", out.String(), stats.tlsErrors.Load())
	}
	for i := range 100 {
		fmt.Fprintf(w, "http: Accept error: accept tcp 127.0.0.1:9477: accept4: too many open files; retrying in %dms\n", 5+i)
	}
	clk.t = clk.t.Add(time.Minute)
	fmt.Fprintf(w, "http: Accept error: accept tcp 127.0.0.1:9477: accept4: too many open files; retrying in 5ms\n")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[1], `"repeats_not_logged":99`) {
		t.Errorf("101 accept errors over a minute logged:\n%s\nwant two warnings, the second saying 99 were not logged", out.String())
	}
}

// TestGPUUnavailableExportsFailure: --nvml without a GPU exports
// collector_success{collector="gpu"} 0.
func TestGPUUnavailableExportsFailure(t *testing.T) {
	h, err := NewHandler(fixed{snap: testSnapshot()}, zerolog.Nop(), NewGPUUnavailable())
	if err != nil {
		t.Fatal(err)
	}
	body := scrapeHandler(t, h)
	if !strings.Contains(body, `vgpu_probe_scrape_collector_success{collector="gpu"} 0`+"\n") {
		t.Errorf("/metrics lacks the GPU collector's failure:\n%s", grepLines(body, "vgpu_probe_scrape_collector_success"))
	}
}

func scrapeHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return get(t, srv.URL+"/metrics", 200)
}
