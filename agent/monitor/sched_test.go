//go:build linux

package monitor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// These tests load the real programs into the running kernel and check
// what they measure against the kernel's own accounting in /proc.

func loadProbe(t *testing.T) *bpfload.Probe {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading eBPF programs needs root")
	}
	p, err := bpfload.Load(bpfload.Options{Events: true, Log: zerolog.Nop()})
	if errors.Is(err, bpfload.ErrPermission) {
		t.Skipf("kernel does not let root load BPF: %v", err)
	}
	if err != nil {
		t.Fatalf("loading probe: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// pinnedThread runs fn on a locked OS thread pinned to cpu. It returns the
// thread id and a release function; the thread parks (sleeps) after fn
// returns until released, so /proc/<tid> stays readable.
func pinnedThread(t *testing.T, cpu int, fn func()) (tid int, release func()) {
	t.Helper()
	tidc := make(chan int)
	rel := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			t.Errorf("pinning to CPU %d: %v", cpu, err)
		}
		tidc <- unix.Gettid()
		fn()
		<-rel
	}()
	tid = <-tidc
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			close(rel)
		}
	}
	t.Cleanup(release)
	return tid, release
}

// schedstat returns run_delay (ns spent runnable, waiting for a CPU) from
// /proc/self/task/<tid>/schedstat.
func schedstat(t *testing.T, tid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", tid))
	if err != nil {
		t.Fatalf("reading schedstat: %v", err)
	}
	f := strings.Fields(string(b))
	v, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("parsing schedstat %q: %v", b, err)
	}
	return v
}

// nivcsw returns the kernel's count of involuntary context switches.
func nivcsw(t *testing.T, tid int) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		t.Fatalf("reading status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "nonvoluntary_ctxt_switches:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	t.Fatal("no nonvoluntary_ctxt_switches in status")
	return 0
}

func findThread(t *testing.T, snap model.Snapshot, tid int) model.Thread {
	t.Helper()
	for _, tg := range snap.Targets {
		for _, th := range tg.Threads {
			if th.TID == tid {
				return th
			}
		}
	}
	t.Fatalf("tid %d not in snapshot %+v", tid, snap)
	return model.Thread{}
}

func within(got, want, frac float64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= frac*want
}

// busyProcess starts a single-threaded shell loop pinned to cpu at nice
// -20, so no Go
// runtime (GC stops, signals) makes it sleep: all its off-CPU time is
// runnable wait.
func busyProcess(t *testing.T, cpu int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
		t.Fatal(err)
	}
	// Nice -20 outweighs other tenants of a shared test machine (a
	// compiler, a VM) about 90 to 1, so the loop gets the CPU time the
	// test reasons about.
	if err := unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, -20); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// Two busy threads pinned to one CPU take turns: each is preempted, runs
// for about a scheduler slice, and the time it waits runnable agrees with
// the kernel's run_delay.
func TestBusyPairOnOneCPU(t *testing.T) {
	p := loadProbe(t)
	m := New(p, Options{Log: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx) // no sources: targets come from Apply; Run reads events
	cpu := runtime.NumCPU() - 1

	ca, cb := busyProcess(t, cpu), busyProcess(t, cpu)
	a, b := ca.Process.Pid, cb.Process.Pid
	time.Sleep(50 * time.Millisecond) // let affinity take effect

	m.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{
		Kind: targets.KindPID, Name: "pair",
		Threads: []targets.Thread{{TID: a, VCPU: 0}, {TID: b, VCPU: 1}},
	}})
	delay0 := map[int]uint64{a: schedstat(t, a), b: schedstat(t, b)}
	ivcs0 := map[int]uint64{a: nivcsw(t, a), b: nivcsw(t, b)}

	time.Sleep(2 * time.Second)
	// Stop both (a stopped task is off the runqueue, not waiting), so no
	// wait is in flight while the two sides are read.
	ca.Process.Signal(unix.SIGSTOP)
	cb.Process.Signal(unix.SIGSTOP)
	time.Sleep(100 * time.Millisecond)

	snap := m.Snapshot()
	for _, tid := range []int{a, b} {
		other := uint32(a + b - tid)
		th := findThread(t, snap, tid)
		runDelay := float64(schedstat(t, tid)-delay0[tid]) / 1e9
		ivcs := float64(nivcsw(t, tid) - ivcs0[tid])
		t.Logf("tid %d: run %.3fs off %.3fs runnable-wait %.3fs (schedstat %.3fs) preempt %d (nivcsw %.0f) run p50/p90 %.0f/%.0fus slice p50 %.0fus steal %.2f corunners %+v",
			tid, th.RunSeconds, th.OffCPUSeconds, th.RunnableWaitSeconds, runDelay, th.Preemptions, ivcs, th.RunP50US, th.RunP90US, th.SliceP50US, th.StealFraction, th.Corunners)

		if th.Preemptions < 50 {
			t.Errorf("tid %d: %d preemptions in 2s of sharing a CPU, want many", tid, th.Preemptions)
		}
		if !within(float64(th.Preemptions), ivcs, 0.05) {
			t.Errorf("tid %d: %d preemptions, kernel counted %.0f involuntary switches", tid, th.Preemptions, ivcs)
		}
		if !within(th.RunnableWaitSeconds, runDelay, 0.05) {
			t.Errorf("tid %d: runnable wait %.4fs, schedstat run_delay %.4fs: differ by more than 5%%", tid, th.RunnableWaitSeconds, runDelay)
		}
		// A busy loop never sleeps (the final SIGSTOP interval is
		// still open): all its off-CPU time is runnable wait.
		if !within(th.OffCPUSeconds, runDelay, 0.05) {
			t.Errorf("tid %d: off-CPU %.4fs, schedstat run_delay %.4fs: differ by more than 5%%", tid, th.OffCPUSeconds, runDelay)
		}
		// The slice: EEVDF's base slice (0.75-3 ms) enforced at the
		// tick (1-10 ms), so a run lasts between a fraction of a ms and
		// a few ticks, never the whole 2 s.
		if th.RunP50US < 300 || th.RunP50US > 30000 {
			t.Errorf("tid %d: run p50 %.0fus, want a scheduler slice (0.3-30 ms)", tid, th.RunP50US)
		}
		if th.StealFraction < 0.3 || th.StealFraction > 0.7 {
			t.Errorf("tid %d: steal fraction %.2f, want ~0.5 for two threads on one CPU", tid, th.StealFraction)
		}
		if !th.Contended || th.ExpectedSliceUS == nil {
			t.Errorf("tid %d: not seen as contended", tid)
		}
		if len(th.Corunners) == 0 || th.Corunners[0].TGID != other {
			t.Errorf("tid %d: top corunner %+v, want the other loop (pid %d)", tid, th.Corunners, other)
		}
	}
	// The timeline holds switch events of both threads.
	evs, err := m.Timeline("pair", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]int{}
	for _, e := range evs {
		seen[e.TID]++
	}
	if seen[uint32(a)] < 100 || seen[uint32(b)] < 100 {
		t.Fatalf("timeline has %v events per tid, want hundreds each", seen)
	}
	if _, err := m.Timeline("nope", time.Second); !errors.Is(err, ErrUnknownTarget) {
		t.Fatalf("timeline of unknown target: %v", err)
	}
}

// A thread that sleeps and wakes is never switched out while runnable.
func TestSleeperIsNotPreempted(t *testing.T) {
	p := loadProbe(t)
	m := New(p, Options{Log: zerolog.Nop()})
	started := make(chan struct{})
	done := make(chan struct{})
	tid, rel := pinnedThread(t, 0, func() {
		<-started
		for i := 0; i < 500; i++ {
			_ = unix.Nanosleep(&unix.Timespec{Nsec: 1_000_000}, nil)
		}
		close(done)
	})
	defer rel()
	m.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: "sleeper", Threads: []targets.Thread{{TID: tid, VCPU: -1}}}})
	ivcs0 := nivcsw(t, tid)
	close(started)
	<-done
	th := findThread(t, m.Snapshot(), tid)
	t.Logf("sleeper: switches %d wakeups %d preemptions %d wake p50 %.1fus off p50 %.0fus", th.Switches, th.Wakeups, th.Preemptions, th.WakeP50US, th.OffCPUP50US)
	if th.Switches < 500 || th.Wakeups < 500 {
		t.Fatalf("switches %d wakeups %d: the sleeps were not seen", th.Switches, th.Wakeups)
	}
	// Other tenants of a shared test machine can, rarely, preempt the
	// few microseconds the sleeper runs; the kernel counts that too.
	if ivcs := nivcsw(t, tid) - ivcs0; th.Preemptions != ivcs {
		t.Errorf("sleeper: %d preemptions, kernel counted %d", th.Preemptions, ivcs)
	}
	if th.Preemptions*100 > th.Switches {
		t.Errorf("sleeping thread has %d involuntary preemptions in %d switches", th.Preemptions, th.Switches)
	}
	if th.WakeP50US <= 0 {
		t.Errorf("wake p50 %.1fus: no wake-to-run latency measured", th.WakeP50US)
	}
	if th.OffCPUP50US < 900 {
		t.Errorf("off-CPU p50 %.0fus, want about the 1 ms sleep", th.OffCPUP50US)
	}
	if th.Preemptions == 0 && (th.Contended || th.ExpectedSliceUS != nil) {
		t.Errorf("sleeper never preempted but seen as contended: %+v", th)
	}
}

// makeQuotaCgroup creates a cgroup with CPU bandwidth quota/period (µs) on
// whatever hierarchy has the cpu controller: pure cgroup v2, or v1.
func makeQuotaCgroup(t *testing.T, quota, period int) string {
	t.Helper()
	name := fmt.Sprintf("vgpu-probe-test-%d", os.Getpid())
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "cpu") {
		_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+cpu"), 0)
		dir := filepath.Join("/sys/fs/cgroup", name)
		mkCgroup(t, dir)
		write(t, filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, period))
		return dir
	}
	for _, root := range []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"} {
		if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		dir := filepath.Join(root, name)
		mkCgroup(t, dir)
		write(t, filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(period))
		write(t, filepath.Join(dir, "cpu.cfs_quota_us"), strconv.Itoa(quota))
		return dir
	}
	t.Skip("no cgroup hierarchy with the cpu controller")
	return ""
}

func mkCgroup(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("creating cgroup: %v", err)
	}
	t.Cleanup(func() {
		// rmdir fails while a task is still inside; the child is
		// killed and reaped by its own cleanup, which runs first.
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", dir)
	})
}

func write(t *testing.T, path, v string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(v), 0); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

// A busy process capped at 20 ms per 100 ms runs 20 ms at a time: the
// quota is its run length and its expected slice.
func TestQuotaIsRunLength(t *testing.T) {
	p := loadProbe(t)
	const quotaUS, periodUS = 20000, 100000
	dir := makeQuotaCgroup(t, quotaUS, periodUS)

	cmd := busyProcess(t, 0)
	write(t, filepath.Join(dir, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid))

	src, err := targets.NewCgroup(dir, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	m := New(p, Options{Log: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx, src)
	if err := m.WaitTargets(ctx, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	snap := m.Snapshot()
	if len(snap.Targets) != 1 || snap.Targets[0].QuotaUS != quotaUS || snap.Targets[0].PeriodUS != periodUS {
		t.Fatalf("cgroup target %+v: quota not read", snap.Targets)
	}
	th := findThread(t, snap, cmd.Process.Pid)
	t.Logf("quota thread: quota-run p50 %.0fus throttles %d run p50/p90 %.0f/%.0fus slice p50 %.0fus preempt %d expected slice %v corunners %+v",
		th.QuotaRunP50US, th.Throttles, th.RunP50US, th.RunP90US, th.SliceP50US, th.Preemptions, deref(th.ExpectedSliceUS), th.Corunners)
	// Other tenants of this CPU may cut the runs short, but the CPU time
	// between two throttles is the quota.
	if !within(th.QuotaRunP50US, quotaUS, 0.25) {
		t.Errorf("run between throttles p50 %.0fus, want the %dus quota", th.QuotaRunP50US, quotaUS)
	}
	// 2 s at one throttle per 100 ms period.
	if th.Throttles < 15 || th.Throttles > 23 {
		t.Errorf("%d throttles in 2s, want ~20", th.Throttles)
	}
	if th.ExpectedSliceUS == nil || *th.ExpectedSliceUS > quotaUS*1.25 {
		t.Errorf("expected slice %v, want at most the ~%dus quota", deref(th.ExpectedSliceUS), quotaUS)
	}
	// While throttled the CPU idles: the idle task (tgid 0) is the
	// "co-runner", and each throttle lasts about period - quota.
	var idle *model.Corunner
	for i := range th.Corunners {
		if th.Corunners[i].TGID == 0 {
			idle = &th.Corunners[i]
		}
	}
	if idle == nil {
		t.Fatalf("no throttling (idle co-runner) among %+v", th.Corunners)
	}
	if per := idle.WaitedSeconds / float64(idle.Preemptions) * 1e6; !within(per, periodUS-quotaUS, 0.3) {
		t.Errorf("throttled for %.0fus each time, want period - quota = %dus", per, periodUS-quotaUS)
	}
}

func deref(p *float64) any {
	if p == nil {
		return "inf"
	}
	return *p
}
