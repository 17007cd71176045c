package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
)

// What the test holds the agent to, from the unit that runs it in
// production (MemoryMax=256M, LimitNOFILE=20000).
const (
	memLimit   = 256 << 20
	agentFiles = 20000
	ringEvents = 1 << 18 // monitor's default timeline ring
	idleConns  = 20500
)

func TestMain(m *testing.M) {
	switch os.Getenv("VGPU_BENCH_HTTP_ROLE") {
	case "busy":
		busy()
	case "holder":
		hold()
	case "ticker":
		ticker()
	case "tenant":
		tenant()
	}
	os.Exit(m.Run())
}

// busy is the watched target: two threads that sleep 50 µs at a time,
// ~10k switches a second each, at little CPU.
func busy() {
	for range 2 {
		go func() {
			runtime.LockOSThread()
			ts := unix.Timespec{Nsec: 50_000}
			for {
				_ = unix.Nanosleep(&ts, nil)
			}
		}()
	}
	select {}
}

func TestAgentHTTPLoad(t *testing.T) {
	if os.Getenv("VGPU_BENCH_HTTP") != "1" {
		t.Skip("a load test of minutes: set VGPU_BENCH_HTTP=1 (make bench-agent-http)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent loads eBPF and the test makes a memory cgroup")
	}
	bin := buildAgent(t)
	target := exec.Command(os.Args[0], "-test.run=^$")
	target.Env = append(os.Environ(), "VGPU_BENCH_HTTP_ROLE=busy")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })
	pid := target.Process.Pid

	t.Run("busy", func(t *testing.T) { busyClients(t, bin, pid) })
	t.Run("idle", func(t *testing.T) { idleFlood(t, bin, pid) })
	t.Run("scrapers", func(t *testing.T) { scrapers(t, bin, pid) })
	t.Run("memory", func(t *testing.T) { fleetMemory(t, bin, pid) })
	t.Run("cardinality", func(t *testing.T) { cardinality(t, bin, pid) })
}

// buildAgent builds the agent, or takes VGPU_BENCH_AGENT_BIN (another
// version's binary, to compare).
func buildAgent(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("VGPU_BENCH_AGENT_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "vgpu-probe")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe").CombinedOutput()
	if err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	return bin
}

// agent is the real agent, run in its own memory cgroup with the
// production file limit.
type agent struct {
	cmd  *exec.Cmd
	addr string
	log  string
	cg   *memcg
	done chan struct{}
}

func startAgent(t *testing.T, bin string, pid int, args ...string) *agent {
	t.Helper()
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("needs prlimit (util-linux) to give the agent its file limit")
	}
	cg, err := newMemcg(fmt.Sprintf("vgpu-probe-bench-http-%d", os.Getpid()), memLimit)
	if err != nil {
		t.Skipf("memory cgroup: %v", err)
	}
	a := &agent{addr: freeAddr(t), log: filepath.Join(t.TempDir(), "agent.log"), cg: cg, done: make(chan struct{})}
	logf, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	script := `echo $$ > "$1" && shift && exec "$@"`
	argv := append([]string{"-c", script, "sh", cg.procsFile(), "prlimit", fmt.Sprintf("--nofile=%d:%d", agentFiles, agentFiles),
		bin, "agent", "--pid", strconv.Itoa(pid), "--listen", a.addr}, args...)
	a.cmd = exec.Command("sh", argv...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() { a.stop(t); cg.remove() })
	a.waitReady(t, strconv.Itoa(pid))
	return a
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady waits until the agent serves the target's timeline.
func (a *agent) waitReady(t *testing.T, name string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		select {
		case <-a.done:
			t.Fatalf("the agent exited: %v\n%s", a.cmd.ProcessState, a.logTail())
		default:
		}
		resp, err := http.Get("http://" + a.addr + "/api/v1/timeline?limit=1&domain=" + name)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	t.Fatalf("the agent did not serve %s's timeline within a minute\n%s", name, a.logTail())
}

func (a *agent) logTail() string {
	b, _ := os.ReadFile(a.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// alive fails the test if the agent died (an OOM kill is SIGKILL).
func (a *agent) alive(t *testing.T) {
	t.Helper()
	select {
	case <-a.done:
		t.Fatalf("the agent died: %v\n%s", a.cmd.ProcessState, a.logTail())
	default:
	}
	if n, err := a.cg.ooms(); err != nil || n != 0 {
		t.Fatalf("OOM kills in the agent's cgroup: %d (%v)", n, err)
	}
}

func (a *agent) stop(t *testing.T) {
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
		t.Error("the agent did not stop on SIGTERM")
	}
}

// memory is the agent's peak RSS (VmHWM) and its cgroup's peak use.
func (a *agent) memory(t *testing.T) (hwm, cgPeak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			hwm = kb << 10
		}
	}
	cgPeak, err = a.cg.peak()
	if err != nil {
		t.Logf("cgroup peak: %v", err)
	}
	return hwm, cgPeak
}

// metricsProbe asks /metrics on a connection of its own every period
// until ctx ends and returns each answer's latency (-1: no answer).
func metricsProbe(ctx context.Context, addr string, period time.Duration) []time.Duration {
	hc := &http.Client{Timeout: 30 * time.Second}
	var lat []time.Duration
	for ctx.Err() == nil {
		start := time.Now()
		resp, err := hc.Get("http://" + addr + "/metrics")
		d := time.Since(start)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("%s", resp.Status)
			}
		}
		if err != nil {
			d = -1
		}
		lat = append(lat, d)
		select {
		case <-time.After(period):
		case <-ctx.Done():
		}
	}
	return lat
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// busyClients: with the ring full, 50 clients over every endpoint and 20
// clients reading the whole timeline for 60 s leave the agent alive in
// 256 MB, and /metrics answering.
func busyClients(t *testing.T, bin string, pid int) {
	a := startAgent(t, bin, pid, "--trace-every", "0")
	name := strconv.Itoa(pid)
	c, err := agentapi.New("http://"+a.addr, &http.Client{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		evs, err := c.Timeline(context.Background(), name, 3600)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) >= ringEvents*95/100 {
			t.Logf("ring full (%d events) after %v", len(evs), time.Since(start).Round(time.Second))
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("the ring holds %d events after 3 minutes: the target is not busy enough", len(evs))
		}
		time.Sleep(2 * time.Second)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg               sync.WaitGroup
		ok, busy, failed atomic.Int64
		wholeReads       atomic.Int64
		paths            = []string{"/metrics", "/api/v1/snapshot", "/api/v1/timeline?seconds=3600&limit=10000&domain=" + name, "/"}
		probeLat         []time.Duration
		probeDone        = make(chan struct{})
	)
	go func() { probeLat = metricsProbe(ctx, a.addr, 100*time.Millisecond); close(probeDone) }()
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: time.Minute}
			for j := i; ctx.Err() == nil; j++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.addr+paths[j%len(paths)], nil)
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case http.StatusServiceUnavailable:
					busy.Add(1)
					time.Sleep(100 * time.Millisecond)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	// The worst case: 20 at once reading the whole ring, again and again.
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := c.Timeline(ctx, name, 3600); err == nil {
					wholeReads.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	<-probeDone
	a.alive(t)
	hwm, peak := a.memory(t)
	answered := slices.DeleteFunc(slices.Clone(probeLat), func(d time.Duration) bool { return d < 0 })
	t.Logf("60 s, 50 mixed clients + 20 whole-timeline readers: %d answered 200, %d turned away busy (503), %d failed; %d whole-ring reads",
		ok.Load(), busy.Load(), failed.Load(), wholeReads.Load())
	t.Logf("agent peak RSS (VmHWM) %.1f MiB, cgroup peak %.1f MiB (limit %d MiB)", float64(hwm)/(1<<20), float64(peak)/(1<<20), memLimit>>20)
	if len(answered) > 0 {
		t.Logf("/metrics every 100 ms meanwhile: %d of %d answered, p50 %v p99 %v max %v", len(answered), len(probeLat),
			quantile(answered, 0.5).Round(time.Microsecond), quantile(answered, 0.99).Round(time.Microsecond), quantile(answered, 1).Round(time.Microsecond))
	}
	if len(answered) != len(probeLat) || len(probeLat) == 0 {
		t.Errorf("/metrics went unanswered %d times of %d", len(probeLat)-len(answered), len(probeLat))
	}
	if wholeReads.Load() == 0 {
		t.Error("no whole-timeline read completed")
	}
}

// idleFlood: 20,500 keep-alive connections that each sent one request and
// idle, more than the agent's 20,000 files, leave /metrics answering
// within a second and the trace windows attaching.
func idleFlood(t *testing.T, bin string, pid int) {
	a := startAgent(t, bin, pid, "--trace-every", "2s", "--trace-window", "500ms")
	traced0 := tracedSeconds(t, a.addr)
	// More connections than one process may have files (the agent's own
	// limit, and often the test's): held by child processes, each within
	// its file limit.
	start := time.Now()
	opened := 0
	for n := idleConns; n > 0; n -= perHolder {
		opened += startHolder(t, a.addr, min(n, perHolder))
	}
	t.Logf("%d connections opened, one request each, held idle, in %v", opened, time.Since(start).Round(time.Millisecond))
	// While they idle: /metrics on a new connection, twice a second.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	lat := metricsProbe(ctx, a.addr, 500*time.Millisecond)
	a.alive(t)
	traced1 := tracedSeconds(t, a.addr)
	hwm, peak := a.memory(t)
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", a.cmd.Process.Pid))
	t.Logf("agent: %d open files (limit %d), peak RSS %.1f MiB, cgroup peak %.1f MiB; traced %.2f s during the flood",
		len(fds), agentFiles, float64(hwm)/(1<<20), float64(peak)/(1<<20), traced1-traced0)
	t.Logf("/metrics on a new connection meanwhile: %v", lat)
	for _, d := range lat {
		if d < 0 || d > time.Second {
			t.Errorf("/metrics answered in %v with %d idle connections open; want within 1 s", d, opened)
		}
	}
	if opened != idleConns {
		t.Errorf("%d of %d connections failed their one request", idleConns-opened, idleConns)
	}
	if !(traced1 > traced0) {
		t.Errorf("no trace window attached during the flood (traced seconds %.2f -> %.2f)", traced0, traced1)
	}
	log := a.logTail()
	for _, bad := range []string{"too many open files", "switching trace window"} {
		if strings.Contains(log, bad) {
			t.Errorf("agent log: %q\n%s", bad, log)
		}
	}
}

// perHolder is the connections one holder process opens: below any
// common file limit.
const perHolder = 7000

// startHolder starts a process holding n idle keep-alive connections to
// addr, each after one request, until the test ends; it returns how many
// it opened.
func startHolder(t *testing.T, addr string, n int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VGPU_BENCH_HTTP_ROLE=holder", "VGPU_BENCH_HTTP_ADDR="+addr, "VGPU_BENCH_HTTP_CONNS="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var opened, failed int
	if _, err := fmt.Fscan(out, &opened, &failed); err != nil {
		t.Fatalf("holder: %v", err)
	}
	return opened
}

// hold is a holder process: it opens the connections, prints how many
// it opened and how many failed, and keeps them until killed.
func hold() {
	addr := os.Getenv("VGPU_BENCH_HTTP_ADDR")
	n, _ := strconv.Atoi(os.Getenv("VGPU_BENCH_HTTP_CONNS"))
	var (
		mu           sync.Mutex
		conns        []net.Conn
		failed, next atomic.Int64
		wg           sync.WaitGroup
	)
	for range 25 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for int(next.Add(1)) <= n {
				c, err := oneRequest(addr)
				if err != nil {
					failed.Add(1)
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println(len(conns), failed.Load())
	select {}
}

// oneRequest opens a keep-alive connection, asks for / on it and leaves
// it open.
func oneRequest(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: agent\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s", resp.Status)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// tracedSeconds reads vgpu_probe_agent_traced_seconds_total.
func tracedSeconds(t *testing.T, addr string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "vgpu_probe_agent_traced_seconds_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatal("/metrics lacks vgpu_probe_agent_traced_seconds_total")
	return 0
}
