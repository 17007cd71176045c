package daemon

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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
)

// The agent as the unit runs it (agent --discover, the unit's
// capabilities, MemoryMax=256M) against a tenant who starts fakes of
// every hypervisor with the longest command lines exec takes.

// memcg is a memory cgroup made for a test: cgroup v2 where the unified
// hierarchy has the memory controller (mounted at /sys/fs/cgroup, or at
// /sys/fs/cgroup/unified beside v1), else v1's memory hierarchy.
type memcg struct {
	dir string
	v2  bool
}

// newMemcg makes a memory cgroup limited to limit bytes, without swap,
// removed in t.Cleanup; it skips where there is no memory controller.
func newMemcg(t *testing.T, limit int64) *memcg {
	t.Helper()
	name := fmt.Sprintf("vgpu-probe-test-%d", os.Getpid())
	g := &memcg{}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
			// Children of the root get the controller once it is enabled
			// there (it may be already).
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0)
			g.dir, g.v2 = filepath.Join(root, name), true
			break
		}
	}
	if g.dir == "" {
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
			t.Skip("no cgroup memory controller (cgroup v2 with memory, or v1's memory hierarchy)")
		}
		g.dir = filepath.Join("/sys/fs/cgroup/memory", name)
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		t.Fatalf("making a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The killed agent leaves the group as it is reaped.
		for i := 0; i < 100 && os.Remove(g.dir) != nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
	})
	limitFile, swapFile := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
	if g.v2 {
		limitFile, swapFile = "memory.max", "memory.swap.max"
	}
	if err := os.WriteFile(filepath.Join(g.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Fatalf("limiting the cgroup's memory: %v", err)
	}
	// Swap would hide an overrun; not every kernel accounts it.
	swap := "0"
	if !g.v2 {
		swap = strconv.FormatInt(limit, 10)
	}
	_ = os.WriteFile(filepath.Join(g.dir, swapFile), []byte(swap), 0)
	return g
}

// ooms is the number of processes the kernel killed in the group for
// want of memory (v1 without an oom_kill count: whether it is under OOM).
func (g *memcg) ooms(t *testing.T) int {
	t.Helper()
	file, keys := "memory.oom_control", []string{"oom_kill", "under_oom"}
	if g.v2 {
		file, keys = "memory.events", []string{"oom_kill"}
	}
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == k {
				n, _ := strconv.Atoi(f[1])
				return n
			}
		}
	}
	t.Fatalf("%s: no %v", file, keys)
	return 0
}

// startInCgroup runs the agent binary bin as the unit does (caps its
// bounding set) inside g, with the Go runtime tracing each collection
// on stderr (GODEBUG=gctrace=1); it is killed in t.Cleanup.
func startInCgroup(t *testing.T, g *memcg, bin string, caps []string, args ...string) *agentProc {
	t.Helper()
	unit := asUnit(context.Background(), bin, caps, args...)
	// The shell joins the group, then becomes setpriv, then the agent.
	cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$1" && shift && exec "$@"`, "sh",
		filepath.Join(g.dir, "cgroup.procs")}, unit.Args...)...)
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	a := &agentProc{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-a.exited })
	return a
}

// gcLine is one line of gctrace: the collection's number and the heap
// it found live (MB).
var gcLine = regexp.MustCompile(`(?m)^gc (\d+) @.* \d+->\d+->(\d+) MB`)

// lastGC is the number of the agent's latest collection and the heap it
// found live, in MB (0, 0 before the first).
func (a *agentProc) lastGC() (n, liveMB int) {
	m := gcLine.FindAllStringSubmatch(a.stderr.String(), -1)
	if len(m) == 0 {
		return 0, 0
	}
	n, _ = strconv.Atoi(m[len(m)-1][1])
	liveMB, _ = strconv.Atoi(m[len(m)-1][2])
	return n, liveMB
}

// scrape reads the agent's /metrics; ok is false while it does not
// answer.
func scrape(addr string) (string, bool) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err == nil && resp.StatusCode == http.StatusOK
}

// gauge is the value of the series name (without labels) in a scrape.
func gauge(metrics, name string) float64 {
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// until scrapes the agent (each scrape allocates, so collections come)
// until cond holds for a scrape, for up to five minutes; it fails the
// test if the agent exits.
func (a *agentProc) until(t *testing.T, addr, what string, cond func(metrics string) bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-a.exited:
			t.Fatalf("the agent exited (%v) waiting for %s:\n%s", a.cmd.ProcessState, what, tail(a.stderr.String()))
		default:
		}
		if m, ok := scrape(addr); ok && cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s:\n%s", what, tail(a.stderr.String()))
		}
	}
}

// liveHeapAfter waits for two collections after the latest one now (the
// first may have begun before) and returns the heap the last found live.
func (a *agentProc) liveHeapAfter(t *testing.T, addr string) int {
	t.Helper()
	from, _ := a.lastGC()
	a.until(t, addr, "two garbage collections", func(string) bool { n, _ := a.lastGC(); return n >= from+2 })
	_, live := a.lastGC()
	return live
}

// tail is the end of a long log, without the collections' lines.
func tail(s string) string {
	lines := strings.Split(s, "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return gcLine.MatchString(l) })
	s = strings.Join(lines, "\n")
	if len(s) > 8000 {
		return "...\n" + s[len(s)-8000:]
	}
	return s
}

// hugeFakes are the tenant's fakes of each kind: the hypervisor's name
// flag takes a whole argument (the name, or the socket a name is read
// from), and the rest of a 6 MB command line is filler.
var hugeFakes = []struct {
	exe, threads string
	args         []string
}{
	{"firecracker", "fc_vcpu %d", []string{"--id", discovertest.LongArg("fc-", "")}},
	{"cloud-hypervisor", "vcpu%d", []string{"--api-socket", discovertest.LongArg("/run/ch-", ".sock")}},
	{"crosvm", "crosvm_vcpu%d", []string{"run", "--socket", discovertest.LongArg("/run/cv-", ".sock")}},
	{"qemu-system-x86_64", "CPU %d/KVM", []string{"-name", discovertest.LongArg("guest=q", ",debug-threads=on")}},
}

// 50 fakes of each hypervisor, run by an unprivileged user with 6 MB
// command lines (47 arguments of 128 KiB): the agent, in a 256 MiB
// memory cgroup as under the unit, lives on with its live heap within
// 10 MB of what it was before them. Discovery once kept substrings of
// each fake's whole command line: 50 Firecracker fakes held 311 MB.
func TestTenantCommandLinesCostNoMemory(t *testing.T) {
	needsRootAndSetpriv(t)
	if testing.Short() {
		t.Skip("starts 200 processes with 6 MB command lines (-short)")
	}
	const perKind, args, slackMB = 50, 47, 10
	g := newMemcg(t, 256<<20)
	bin := buildAgent(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := startInCgroup(t, g, bin, unitCaps(t), "--discover", "--listen", addr)
	a.until(t, addr, "the agent to serve", func(m string) bool {
		return gauge(m, "vgpu_probe_discover_untrusted_processes") >= 0
	})
	idle := a.liveHeapAfter(t, addr)
	before := gauge(mustScrape(t, a, addr), "vgpu_probe_discover_untrusted_processes")

	discovertest.AllowLongCommandLines(t)
	for _, f := range hugeFakes {
		exe := discovertest.TenantStandIn(t, discovertest.Tenant, f.exe)
		line := discovertest.LongCommandLine(args, f.args...) // one copy for all 50
		for range perKind {
			discovertest.Start(t, exe, discovertest.Tenant, f.threads, 2, line...)
		}
	}
	want := before + float64(perKind*len(hugeFakes))
	a.until(t, addr, fmt.Sprintf("%v untrusted processes counted", want), func(m string) bool {
		return gauge(m, "vgpu_probe_discover_untrusted_processes") >= want
	})
	with := a.liveHeapAfter(t, addr)
	t.Logf("live heap %d MB idle, %d MB with %d fakes of %d kinds", idle, with, perKind, len(hugeFakes))
	if with > idle+slackMB {
		t.Errorf("live heap %d MB with the fakes, %d MB before: more than %d MB kept", with, idle, slackMB)
	}
	if n := g.ooms(t); n != 0 {
		t.Errorf("%d out-of-memory kills in the agent's cgroup", n)
	}
	select {
	case <-a.exited:
		t.Fatalf("the agent exited (%v):\n%s", a.cmd.ProcessState, tail(a.stderr.String()))
	default:
	}
}

func mustScrape(t *testing.T, a *agentProc, addr string) string {
	t.Helper()
	m, ok := scrape(addr)
	if !ok {
		t.Fatalf("the agent does not answer on %s:\n%s", addr, tail(a.stderr.String()))
	}
	return m
}
