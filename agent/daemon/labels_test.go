package daemon

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// Names that are bytes, not text, in front of a real agent: each is
// exposed as a valid label value (each invalid byte a U+FFFD) and every
// scrape answers 200. One such name used to turn /metrics into HTTP 500
// for every VM, for as long as the name was in the snapshot.

// unusedLoopbackAddr is a loopback address nothing listens on now.
func unusedLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// agentClient gives up on an answer that does not come, so that the
// tests' deadlines hold.
var agentClient = &http.Client{Timeout: 30 * time.Second}

// get200 GETs path from the agent at addr: the body, or ok false while
// the agent does not answer (yet). An answer other than 200 and UTF-8
// fails the test.
func (a *agentProc) get200(t *testing.T, addr, path string) (string, bool) {
	t.Helper()
	resp, err := agentClient.Get("http://" + addr + path)
	if err != nil {
		select {
		case <-a.exited:
			if a.cmd.ProcessState.ExitCode() == 3 {
				t.Skipf("kernel does not let root load BPF: %s", a.stderr.String())
			}
			t.Fatalf("agent exited (%v):\n%s", a.cmd.ProcessState, a.stderr.String())
		default:
		}
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", false
	}
	if resp.StatusCode != http.StatusOK || !utf8.Valid(b) {
		t.Fatalf("GET %s: %d, want 200 (UTF-8 %v):\n%.3000s", path, resp.StatusCode, utf8.Valid(b), b)
	}
	return string(b), true
}

// waitSeries scrapes the agent until /metrics has a line that want
// matches, every answer a 200, for up to 2 minutes (discovery, and a
// trace window that sees the co-runner, on a busy machine).
func (a *agentProc) waitSeries(t *testing.T, addr string, want *regexp.Regexp) {
	t.Helper()
	last := ""
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		body, ok := a.get200(t, addr, "/metrics")
		if ok && want.MatchString(body) {
			return
		}
		if ok {
			last = body
		}
	}
	t.Fatalf("/metrics never held %q; last:\n%s\nagent:\n%s", want, seriesLines(last), a.stderr.String())
}

// seriesLines are the per-target series of an exposition.
func seriesLines(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "vgpu_probe_vcpu_") || strings.HasPrefix(l, "vgpu_probe_target_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// snapshotIsJSON: /api/v1/snapshot answers 200 with JSON.
func (a *agentProc) snapshotIsJSON(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if body, ok := a.get200(t, addr, "/api/v1/snapshot"); ok {
			if !json.Valid([]byte(body)) {
				t.Fatalf("/api/v1/snapshot is not JSON:\n%.3000s", body)
			}
			return
		}
	}
	t.Fatal("/api/v1/snapshot did not answer")
}

// A trusted QEMU named with bytes that are not UTF-8: its series are
// there under the name made valid (whichever of discovery and the
// exporter makes it so), and every scrape answers 200.
func TestMetricsNonUTF8VMName(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	discovertest.QEMU(t, "-name", "guest=bad\xff\xfename,debug-threads=on", "-smp", "2")
	addr := unusedLoopbackAddr(t)
	a := runAgent(t, nil, "none", "", t.TempDir(), envAgentDiscover+"=1", envAgentListen+"="+addr)
	a.waitSeries(t, addr, regexp.MustCompile(`(?m)^vgpu_probe_vcpu_run_seconds_total\{domain="bad[^"]*name",vcpu="1"\} `))
	a.snapshotIsJSON(t, addr)
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup
// on a pure v2 host, its unified/ directory on a hybrid one.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir
		}
	}
	t.Skip("no cgroup v2 hierarchy mounted")
	return ""
}

// busyInCgroup starts a busy loop that is in cgroup dir before it runs a
// single loop iteration, killed at the end of the test.
func busyInCgroup(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", `echo $$ >"$1/cgroup.procs" && exec /bin/sh -c 'while :; do :; done'`, "sh", dir)
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

// A co-runner in a cgroup whose path is not UTF-8 (a user may name the
// cgroups delegated to it so) takes the CPU of a watched process: the
// agent reports it under the path made valid, every scrape answers 200,
// and they go on doing so once it exits and its cgroup is removed.
func TestMetricsNonUTF8CorunnerCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs and makes cgroups: needs root")
	}
	name := "vgpu-probe-test-\xff\xfe-" + strconv.Itoa(os.Getpid())
	dir := filepath.Join(cgroup2Mount(t), name)
	if err := os.Mkdir(dir, 0o755); errors.Is(err, unix.EROFS) {
		t.Skipf("cgroup v2 hierarchy read-only: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	// Both run on one CPU before the agent starts: the co-runner is the
	// biggest from the first trace window on, so it is among the first
	// keys named, whatever else a busy machine runs there.
	co := busyInCgroup(t, dir)
	watched := busyLoop(t)
	one := schedtest.LastCPU(t)
	for _, pid := range []int{watched, co.Process.Pid} {
		if err := unix.SchedSetaffinity(pid, &one); err != nil {
			t.Fatalf("pinning %d: %v", pid, err)
		}
	}
	addr := unusedLoopbackAddr(t)
	a := runAgent(t, []int{watched}, "none", "", t.TempDir(), envAgentListen+"="+addr)
	label := `corunner="/vgpu-probe-test-` + "\uFFFD\uFFFD" + `-` + strconv.Itoa(os.Getpid()) + `"`
	a.waitSeries(t, addr, regexp.MustCompile(regexp.QuoteMeta(label)))
	a.snapshotIsJSON(t, addr)

	co.Process.Kill()
	co.Wait()
	for deadline := time.Now().Add(30 * time.Second); os.Remove(dir) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cgroup %q not removable after its process exited", dir)
		}
	}
	// Collections past the co-runner's exit (one per second at most).
	// Its wait stays a counter of the watched process for as long as
	// that is watched (the programs keep it per watched thread): the
	// series stays, valid.
	body := ""
	for range 5 {
		time.Sleep(time.Second)
		var ok bool
		if body, ok = a.get200(t, addr, "/metrics"); !ok {
			t.Fatalf("/metrics did not answer after the co-runner exited:\n%s", a.stderr.String())
		}
	}
	t.Logf("after the co-runner exited: its series still served: %v", strings.Contains(body, label))
	a.snapshotIsJSON(t, addr)
}
