package libvirt

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend/libvirt/job"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// e2e returns the vgpu-probe binary to test, or skips: the end-to-end
// tests run from make e2e, which builds the binary and the image first.
func e2e(t *testing.T) string {
	t.Helper()
	if os.Getenv("VGPU_E2E") != "1" {
		t.Skip("end-to-end test: run make e2e (sets VGPU_E2E=1 and VGPU_PROBE_BIN)")
	}
	bin := os.Getenv("VGPU_PROBE_BIN")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("VGPU_PROBE_BIN=%q: %v", bin, err)
	}
	return bin
}

// `vgpu-probe run --backend libvirt --with-agent`: a 1-vCPU gpurunner and
// a while1 co-runner pinned to the same CPU, spin, block and hybrid. Every
// cell must arrive with the agent's view of the runner's vCPU thread, and
// nothing may be left behind.
func TestE2ERun(t *testing.T) {
	bin := e2e(t)
	l := libvirttest.Connect(t)
	jobImage(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.CommandContext(t.Context(), bin, "run", "--backend", "libvirt", "--with-agent",
		"--scenario", "shared1,baseline", "--vcpus", "1", "--corunner", "while1", "--modes", "spin,block,hybrid",
		"--reps", "1", "--steps", "300", "--nvml-interval", "0", "--out", out)
	b, err := cmd.CombinedOutput()
	t.Logf("%s", b)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	f, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Cells) != 6 || f.Config.Backend != "libvirt" {
		t.Fatalf("%d cells (backend %s), want 6 from libvirt", len(f.Cells), f.Config.Backend)
	}
	for _, c := range f.Cells {
		if c.Median.Steps != 300 || c.Median.WallS <= 0 {
			t.Errorf("%s %s: median %+v", c.Scenario, c.Mode, c.Median)
		}
		if c.AgentError != "" || len(c.Agent) == 0 {
			t.Errorf("%s %s: no agent view (%s)", c.Scenario, c.Mode, c.AgentError)
			continue
		}
		if c.Timeline == nil || len(c.Timeline.Threads) == 0 || c.Timeline.Threads[0].Name != "runner vcpu0" {
			t.Errorf("%s %s: no host timeline of the runner's vCPU", c.Scenario, c.Mode)
		}
	}
	checkClean(t, l)
	// The run was another process: none of its domains or files may remain.
	if n := running(t, l, "vgpu-probe-run-"); len(n) > 0 {
		t.Errorf("domains left behind by run: %v", n)
	}
	if d, _ := filepath.Glob(filepath.Join(os.TempDir(), "vgpu-probe-run-*")); len(d) > 0 {
		t.Errorf("files left behind by run: %v", d)
	}
}

// `vgpu-probe run --backend libvirt --hints`: the host publishes the
// gpurunner's hint page into its ivshmem device, the guest's init exposes
// it, and the hybrid loop's waits must have read it (answered calls in
// the result), beside a while1 co-runner on the same CPU. The page's file
// must be gone afterwards.
func TestE2EHints(t *testing.T) {
	bin := e2e(t)
	l := libvirttest.Connect(t)
	jobImage(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.CommandContext(t.Context(), bin, "run", "--backend", "libvirt", "--hints",
		"--scenario", "shared1", "--vcpus", "1", "--corunner", "while1", "--modes", "hybrid",
		"--reps", "1", "--steps", "300", "--nvml-interval", "0", "--out", out)
	b, err := cmd.CombinedOutput()
	t.Logf("%s", b)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	f, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Cells) != 1 || !f.Config.Hints {
		t.Fatalf("%d cells (hints %v), want 1 with hints", len(f.Cells), f.Config.Hints)
	}
	for _, r := range f.Cells[0].Reps {
		if r.Hints == nil || r.Hints.Used == 0 {
			t.Errorf("the guest's waits read no hints: %+v", r.Hints)
			continue
		}
		t.Logf("hint page answered %d calls; fell back: %v", r.Hints.Used, r.Hints.Fallbacks)
	}
	checkClean(t, l)
	if p, _ := filepath.Glob(filepath.Join(hints.DefaultDir, hintpage.FilePrefix+"vgpu-probe-run-*")); len(p) > 0 {
		t.Errorf("hint pages left behind by run: %v", p)
	}
}

// `vgpu-probe run --backend libvirt --hints --mitigate slice=100us`: while
// the run lasts, the gpurunner's vCPU thread on the host has the 100 µs
// slice, and so has its QEMU's main thread (the emulator's main loop,
// which under TCG delivers the guest's timer wake-ups), and the vCPU's slot
// of the hint page says so (what the guest's waits
// read); the guest's waits read the page, and results.json records both
// settings.
func TestE2EHintsMitigate(t *testing.T) {
	bin := e2e(t)
	l := libvirttest.Connect(t)
	jobImage(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.CommandContext(t.Context(), bin, "run", "--backend", "libvirt", "--hints", "--mitigate", "slice=100us",
		"--scenario", "shared1", "--vcpus", "1", "--corunner", "while1", "--modes", "hybrid",
		"--reps", "1", "--steps", "300", "--nvml-interval", "0", "--out", out)
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan mitigationSeen, 1)
	go func() { seen <- watchMitigation(cmd.Process.Pid) }()
	err := cmd.Wait()
	t.Logf("%s", output.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	m := <-seen
	t.Logf("vCPU thread %d: slot mitigation %d ns, kernel slice %d ns; emulator thread slice %d ns", m.tid, m.slotNs, m.kernelNs, m.emulatorNs)
	if m.tid == 0 || m.slotNs != 100_000 || m.kernelNs != 100_000 || m.emulatorNs != 100_000 {
		t.Errorf("while the run lasted: vCPU thread %d, its slot's mitigation %d ns, its slice in the kernel %d ns, its emulator thread's %d ns; want 100000 in all",
			m.tid, m.slotNs, m.kernelNs, m.emulatorNs)
	}
	f, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Cells) != 1 || !f.Config.Hints || f.Config.Mitigate != "slice=100us" {
		t.Fatalf("%d cells (hints %v, mitigate %q), want 1 with hints and slice=100us", len(f.Cells), f.Config.Hints, f.Config.Mitigate)
	}
	for _, r := range f.Cells[0].Reps {
		if r.Hints == nil || r.Hints.Used == 0 {
			t.Errorf("the guest's waits read no hints: %+v", r.Hints)
		}
	}
	checkClean(t, l)
	if p, _ := filepath.Glob(filepath.Join(hints.DefaultDir, hintpage.FilePrefix+"vgpu-probe-run-*")); len(p) > 0 {
		t.Errorf("hint pages left behind by run: %v", p)
	}
}

// mitigationSeen is the runner's vCPU thread as a run showed it.
type mitigationSeen struct {
	tid                          int
	slotNs, kernelNs, emulatorNs uint64
}

// watchMitigation polls the run whose pid is given until it exits: the
// gpurunner's page (slot 0, its vCPU) and its vCPU thread on the host
// (found by name, as the page's vCPU slots carry no thread id). It
// returns the first sight of a mitigation in both, or the last seen.
func watchMitigation(pid int) mitigationSeen {
	var m mitigationSeen
	prefix := fmt.Sprintf("vgpu-probe-run-%d-", pid)
	for ; syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
		paths, _ := filepath.Glob(filepath.Join(hints.DefaultDir, hintpage.FilePrefix+prefix+"*"))
		for _, p := range paths {
			f, err := hintpage.Map(p)
			if err != nil {
				continue
			}
			var s hintpage.Slot
			if f.ReadSlot(0, &s) == nil {
				m.slotNs = uint64(s.MitigationNs)
			}
			f.Close()
		}
		if m.tid = vcpuThread(prefix, "gpurunner"); m.tid != 0 {
			m.kernelNs = schedSlice(m.tid)
			m.emulatorNs = schedSlice(tgid(m.tid))
		}
		if m.slotNs == 100_000 && m.kernelNs == 100_000 && m.emulatorNs == 100_000 {
			return m
		}
	}
	return m
}

// vcpuThread is the host thread of vCPU 0 of the domain whose name starts
// with prefix and contains role (QEMU's -name guest=NAME), or 0.
func vcpuThread(prefix, role string) int {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		b, err := os.ReadFile(c)
		if err != nil || !strings.Contains(string(b), "guest="+prefix) || !strings.Contains(string(b), role) {
			continue
		}
		tasks, _ := filepath.Glob(filepath.Join(filepath.Dir(c), "task", "*", "comm"))
		for _, t := range tasks {
			if comm, _ := os.ReadFile(t); strings.HasPrefix(string(comm), "CPU 0/") {
				tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(t)))
				return tid
			}
		}
	}
	return 0
}

// tgid is the process of thread tid (its main thread's id), or 0.
func tgid(tid int) int {
	st, err := procstat.Status(tid)
	if err != nil {
		return 0
	}
	return st.TGID
}

// schedSlice is the thread's se.slice from /proc, ns (0: unknown).
func schedSlice(tid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/sched", tid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "se.slice" {
			var n uint64
			fmt.Sscan(f[2], &n)
			return n
		}
	}
	return 0
}

// The agent's off-CPU time of the gpurunner's vCPU thread, watched through
// libvirt discovery, must agree with the gaps the guest saw in its own
// clock while spinning on that vCPU next to a while1 co-runner.
func TestE2EAgentAgreesWithGuest(t *testing.T) {
	bin := e2e(t)
	l := libvirttest.Connect(t)
	b := &Backend{ImageDir: jobImage(t), Log: func(m string) { t.Log(m) }}
	cpus := lastCPU(t)
	topo := backend.Topology{Runner: backend.VM{Name: "runner", CPUs: cpus}, Corunners: []backend.VM{{Name: "corunner1", CPUs: cpus}}}
	be, err := b.Create(t.Context(), topo, backend.Load{Kind: "while1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := be.Destroy(); err != nil {
			t.Error(err)
		}
		checkClean(t, l)
	}()
	e := be.(*env)
	runnerName, _ := e.Domains()
	addr := startAgent(t, bin, runnerName)
	const window = 3 * time.Second
	gaps, err := e.Gaps(t.Context(), window)
	if err != nil {
		t.Fatal(err)
	}
	g := gaps[0]
	host, hostLong := offCPU(t, addr, runnerName, e.VCPUThreads()[0], g.StartNs, g.EndNs)
	span := float64(g.EndNs-g.StartNs) / 1e9
	t.Logf("over %.2fs: guest saw %d gaps, %.3fs (%.3fs in gaps of 1 ms or more; p50 %.0f µs, max %.0f µs); agent: %.3fs off-CPU (%.3fs in intervals of 1 ms or more)",
		span, g.Count, g.TotalS, g.LongS, g.P50US, g.MaxUS, host, hostLong)
	if g.TotalS < 0.2*span {
		t.Errorf("guest saw only %.3fs of gaps in %.2fs next to a busy co-runner: the two vCPUs do not share a CPU?", g.TotalS, span)
	}
	// Compared: the total time away. The guest sees every host off-CPU
	// interval, plus, on each return, the time its kernel spends on the
	// timer interrupts that came due while it was away: under TCG that is
	// a few hundred µs of emulated kernel code per return, which the host
	// counts as running. Measured: the guest's figure is 15-25% above the
	// agent's (agent/guest 0.80-0.85 in five runs). Tolerance: the agent
	// between 75% and 102% of the guest's figure. Only intervals of 1 ms
	// or more on both sides were compared before: the host sometimes
	// splits one guest gap into pieces (its vCPU thread runs briefly
	// between them), which moved that ratio from 0.78-0.84 to 0.71 in one
	// run of five while the totals stayed at 0.83.
	if r := host / g.TotalS; r < 0.75 || r > 1.02 {
		t.Errorf("agent %.3fs vs guest %.3fs off-CPU: ratio %.2f, want 0.75-1.02", host, g.TotalS, r)
	}
}

// startAgent runs the agent on every libvirt domain and returns its
// address once it watches the domain named name.
func startAgent(t *testing.T, bin, name string) string {
	t.Helper()
	cmd := exec.Command(bin, "agent", "--libvirt-uri", DefaultURI, "--listen", "127.0.0.1:0", "--trace-every", "0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	addrCh, ready := make(chan string, 1), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if i := strings.Index(line, "listen="); i >= 0 {
				addrCh <- strings.Fields(line[i+len("listen="):])[0]
			}
			if strings.Contains(line, "watching target") && strings.Contains(line, name) {
				close(ready)
			}
		}
	}()
	var addr string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for addr == "" || ready != nil {
		select {
		case addr = <-addrCh:
		case <-ready:
			ready = nil
		case <-ctx.Done():
			t.Fatalf("agent: not watching %s after 30s", name)
		}
	}
	return addr
}

// offCPU sums the agent's off-CPU intervals of thread tid that fall in
// [start, end] (host CLOCK_MONOTONIC ns), in seconds: all of them, and
// those of job.LongGap or more.
func offCPU(t *testing.T, addr, domain string, tid int, start, end int64) (float64, float64) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/api/v1/timeline?domain=%s&seconds=60", addr, domain))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tl struct {
		Events []struct {
			InMonoNs uint64  `json:"in_mono_ns"`
			TID      int     `json:"tid"`
			OffUS    float64 `json:"off_us"`
		} `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tl); err != nil {
		t.Fatal(err)
	}
	var sum, long int64
	for _, ev := range tl.Events {
		if ev.TID != tid {
			continue
		}
		in := int64(ev.InMonoNs)
		out := in - int64(ev.OffUS*1e3)
		if a, b := max(out, start), min(in, end); a < b {
			sum += b - a
			if in-out >= int64(job.LongGap) {
				long += b - a
			}
		}
	}
	return float64(sum) / 1e9, float64(long) / 1e9
}

// Ctrl-C while the guests run: the run says it was interrupted and every
// domain and file it made is gone.
func TestE2EInterrupt(t *testing.T) {
	bin := e2e(t)
	l := libvirttest.Connect(t)
	jobImage(t)
	cmd := exec.Command(bin, "run", "--backend", "libvirt", "--scenario", "shared1", "--vcpus", "1",
		"--modes", "spin", "--reps", "50", "--steps", "3000", "--nvml-interval", "0", "--out", filepath.Join(t.TempDir(), "run"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	prefix := namePrefix(cmd.Process.Pid)
	deadline := time.Now().Add(2 * time.Minute)
	for len(running(t, l, prefix)) < 2 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no domains of %s after 2 minutes: %s", prefix, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // into the measurements
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if err == nil || !strings.Contains(out.String(), "interrupted") {
		t.Errorf("run after SIGINT: %v, output %q", err, out.String())
	}
	if n := running(t, l, prefix); len(n) > 0 {
		t.Errorf("domains left after SIGINT: %v", n)
	}
	if d, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*")); len(d) > 0 {
		t.Errorf("files left after SIGINT: %v", d)
	}
}
