package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
)

// fleetTargets is the --pid targets of the fleet tests: the 200
// processes, each a thread that wakes every 100 ms (so that every target
// has full histograms) and the Go runtime's threads.
const fleetTargets = 200

// ticker is a fleet target: one thread waking every 100 ms.
func ticker() {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	ts := unix.Timespec{Nsec: 100_000_000}
	for {
		_ = unix.Nanosleep(&ts, nil)
	}
}

// tenant names 500 threads like QEMU's vCPU threads and sleeps.
func tenant() {
	ready := make(chan struct{}, 500)
	for i := range 500 {
		go func() {
			runtime.LockOSThread()
			_ = os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", unix.Gettid()), []byte(fmt.Sprintf("CPU %d/KVM", i)), 0)
			ready <- struct{}{}
			select {}
		}()
	}
	for range 500 {
		<-ready
	}
	fmt.Println("ready")
	select {}
}

// startRole starts this test binary in a role and returns its pid; with
// ready, it waits for the role's "ready" line.
func startRole(t *testing.T, role string, ready bool) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VGPU_BENCH_HTTP_ROLE="+role)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if ready {
		if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("%s did not get ready", role)
		}
	}
	return cmd.Process.Pid
}

// fleetArgs starts the fleet's targets and returns their --pid flags.
func fleetArgs(t *testing.T) []string {
	var args []string
	for range fleetTargets {
		args = append(args, "--pid", strconv.Itoa(startRole(t, "ticker", false)))
	}
	return args
}

// scrape reads /metrics once and returns its body.
func scrape(hc *http.Client, addr string) (string, error) {
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s", resp.Status)
	}
	return string(b), err
}

// drain reads /metrics once into nothing.
func drain(hc *http.Client, addr string) error {
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s", resp.Status)
	}
	return err
}

// seriesOf counts a scrape's samples whose labels include sel.
func seriesOf(body, sel string) (n int, vcpus []string) {
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "#") || !strings.Contains(line, sel) {
			continue
		}
		n++
		if _, v, ok := strings.Cut(line, `vcpu="`); ok {
			v, _, _ = strings.Cut(v, `"`)
			if !slices.Contains(vcpus, v) {
				vcpus = append(vcpus, v)
			}
		}
	}
	return n, vcpus
}

func samples(body string) int {
	n := 0
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}

// scrapers: 200 targets and 60 clients scraping /metrics back to back
// for 30 s; Prometheus' own scrape, on a connection of its own every
// 500 ms, answers within 2 s (p99).
func scrapers(t *testing.T, bin string, pid int) {
	a := startAgent(t, bin, pid, fleetArgs(t)...)
	a.waitAllTargets(t, fleetTargets+1)
	hc := &http.Client{Timeout: time.Minute}
	body, err := scrape(hc, a.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d targets: %d samples, %d bytes a scrape", fleetTargets+1, samples(body), len(body))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		wg           sync.WaitGroup
		served, fail atomic.Int64
	)
	for range 60 {
		wg.Go(func() {
			// The text format uncompressed, read and dropped: the most a
			// scrape costs the agent, the least it costs the test.
			c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableCompression: true}}
			for ctx.Err() == nil {
				if err := drain(c, a.addr); err != nil {
					if ctx.Err() == nil {
						fail.Add(1)
					}
					continue
				}
				served.Add(1)
			}
		})
	}
	lat := metricsProbe(ctx, a.addr, 500*time.Millisecond)
	wg.Wait()
	a.alive(t)
	answered := slices.DeleteFunc(slices.Clone(lat), func(d time.Duration) bool { return d < 0 })
	after, _ := scrape(hc, a.addr)
	t.Logf("30 s, 60 scrapers back to back: %d scrapes served (%.0f/s), %d failed; %s", served.Load(), float64(served.Load())/30,
		fail.Load(), metricLine(after, "vgpu_probe_http_metrics_collections_total"))
	if len(answered) == 0 {
		t.Fatal("the probe's scrapes all failed")
	}
	p50, p99, mx := quantile(answered, 0.5), quantile(answered, 0.99), quantile(answered, 1)
	t.Logf("a legitimate scrape meanwhile: %d of %d answered, p50 %v p99 %v max %v", len(answered), len(lat),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond))
	if len(answered) != len(lat) {
		t.Errorf("%d of %d probe scrapes failed", len(lat)-len(answered), len(lat))
	}
	if p99 > 2*time.Second {
		t.Errorf("p99 %v with 60 scrapers, want under 2 s", p99)
	}
}

// waitAllTargets waits until the agent watches n targets.
func (a *agent) waitAllTargets(t *testing.T, n int) {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		body, err := scrape(hc, a.addr)
		if err == nil && metricLine(body, `vgpu_probe_agent_targets{kind="pid"}`) == fmt.Sprintf(`vgpu_probe_agent_targets{kind="pid"} %d`, n) {
			return
		}
	}
	t.Fatalf("the agent does not watch %d targets within 2 minutes\n%s", n, a.logTail())
}

func metricLine(body, prefix string) string {
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, prefix+" ") {
			return strings.TrimSpace(line)
		}
	}
	return prefix + " absent"
}

// fleetMemory: 202 targets, 20,000 idle connections, 8 clients reading
// whole timelines and 4 scrapers, in the unit's 256 MiB: the agent's
// cgroup stays under 200 MiB.
func fleetMemory(t *testing.T, bin string, pid int) {
	args := append(fleetArgs(t), "--pid", strconv.Itoa(startRole(t, "busy", false)))
	a := startAgent(t, bin, pid, args...)
	a.waitAllTargets(t, fleetTargets+2)
	start := time.Now()
	opened := 0
	for n := 20000; n > 0; n -= perHolder {
		opened += startHolder(t, a.addr, min(n, perHolder))
	}
	t.Logf("%d connections opened and held idle in %v", opened, time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	c, err := agentapi.New("http://"+a.addr, &http.Client{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var reads, scrapes atomic.Int64
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := c.Timeline(ctx, strconv.Itoa(pid), 3600); err == nil {
					reads.Add(1)
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			hc := &http.Client{Timeout: time.Minute}
			for ctx.Err() == nil {
				if _, err := scrape(hc, a.addr); err == nil {
					scrapes.Add(1)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	a.alive(t)
	hwm, peak := a.memory(t)
	body, _ := scrape(&http.Client{Timeout: time.Minute}, a.addr)
	t.Logf("202 targets + %d idle connections + 8 timeline readers (%d whole reads) + 4 scrapers (%d) for 30 s: cgroup peak %.1f MiB, VmHWM %.1f MiB (limit %d MiB); %s, %s, %s",
		opened, reads.Load(), scrapes.Load(), float64(peak)/(1<<20), float64(hwm)/(1<<20), memLimit>>20,
		metricLine(body, "vgpu_probe_http_connections_open"), metricLine(body, "vgpu_probe_http_connections_max"),
		metricLine(body, "vgpu_probe_http_connections_evicted_total"))
	if peak >= 200<<20 {
		t.Errorf("cgroup peak %.1f MiB, want under 200", float64(peak)/(1<<20))
	}
}

// cardinality: a sleeping process costs at most 20 series; a process of
// 500 threads named "CPU n/KVM" has no vcpu label but none.
func cardinality(t *testing.T, bin string, pid int) {
	sleep := exec.Command("sleep", "1000")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	sleeping := sleep.Process.Pid
	tenantPid := startRole(t, "tenant", true)
	args := []string{"--pid", strconv.Itoa(sleeping), "--pid", strconv.Itoa(tenantPid)}
	// The same tenant's process again, in a cgroup of its own, as a
	// --cgroup target.
	cgTenant := startRole(t, "tenant", true)
	cg, err := cpuCgroup(fmt.Sprintf("vgpu-probe-bench-tenant-%d", os.Getpid()), cgTenant)
	if err != nil {
		t.Skipf("a cgroup for the tenant: %v", err)
	}
	t.Cleanup(func() {
		// The tenant outlives this cleanup (its own ends later): out
		// first, so that the group can go.
		_ = os.WriteFile(filepath.Dir(cg)+"/cgroup.procs", []byte(strconv.Itoa(cgTenant)), 0)
		os.Remove(cg)
	})
	args = append(args, "--cgroup", cg)
	a := startAgent(t, bin, pid, args...)
	a.waitAllTargets(t, 3)
	time.Sleep(3 * time.Second) // a few trace windows
	body, err := scrape(&http.Client{Timeout: time.Minute}, a.addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := seriesOf(body, `domain="`+strconv.Itoa(sleeping)+`"`)
	tn, vcpus := seriesOf(body, `domain="`+strconv.Itoa(tenantPid)+`"`)
	t.Logf("a sleeping process: %d series; a process with 500 threads named \"CPU n/KVM\": %d series, %d vcpu values", n, tn, len(vcpus))
	if n > 20 {
		t.Errorf("a sleeping process costs %d series, want at most 20", n)
	}
	if len(vcpus) != 1 || vcpus[0] != "none" {
		t.Errorf("the tenant's named threads gave %d vcpu values (%.40v...), want only none", len(vcpus), vcpus)
	}
	cn, cvcpus := seriesOf(body, `domain="`+cg+`"`)
	t.Logf("the same as a --cgroup target: %d series, %d vcpu values", cn, len(cvcpus))
	if len(cvcpus) != 1 || cvcpus[0] != "none" {
		t.Errorf("--cgroup: the tenant's named threads gave %d vcpu values (%.40v...), want only none", len(cvcpus), cvcpus)
	}
}

// cpuCgroup makes a cgroup named name (v2, else v1's cpu hierarchy),
// moves process pid (all its threads) into it and returns its path.
func cpuCgroup(name string, pid int) (string, error) {
	dir := cgRoot + "/" + name
	if _, err := os.Stat(cgRoot + "/cgroup.controllers"); err != nil {
		dir = cgRoot + "/cpu/" + name
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}
