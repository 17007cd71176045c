//go:build linux

package monitor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
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

// schedStat is /proc/<pid>/schedstat: time on CPU, time runnable waiting
// for a CPU (run_delay), and the number of times it was switched in.
type schedStat struct{ runNs, delayNs, slices uint64 }

func (s schedStat) sub(o schedStat) schedStat {
	return schedStat{s.runNs - o.runNs, s.delayNs - o.delayNs, s.slices - o.slices}
}

func readSchedstat(t *testing.T, tid int) schedStat {
	t.Helper()
	c, err := procstat.Read(tid)
	if err != nil {
		t.Fatal(err)
	}
	return schedStat{c.RunNs, c.RunDelayNs, c.Timeslices}
}

// nivcsw returns the kernel's count of involuntary context switches.
func nivcsw(t *testing.T, tid int) uint64 {
	t.Helper()
	c, err := procstat.Read(tid)
	if err != nil {
		t.Fatal(err)
	}
	return c.Involuntary
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
	go m.Run(ctx) // targets come from Apply; Run reads events
	ca, cb := stoppedPair(t, m)
	a, b := ca.Process.Pid, cb.Process.Pid
	k0 := map[int]schedStat{a: readSchedstat(t, a), b: readSchedstat(t, b)}
	ivcs0 := map[int]uint64{a: nivcsw(t, a), b: nivcsw(t, b)}
	signalAndWait(t, unix.SIGCONT, false, ca, cb)
	time.Sleep(2 * time.Second)
	signalAndWait(t, unix.SIGSTOP, true, ca, cb)
	time.Sleep(300 * time.Millisecond) // the event reader drains every 100 ms

	snap := m.Snapshot()
	evs, err := m.Timeline("pair", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ins := map[uint32]uint64{}
	for _, e := range evs {
		ins[e.TID]++
	}
	for _, tid := range []int{a, b} {
		other := uint32(a + b - tid)
		th := findThread(t, snap, tid)
		k := readSchedstat(t, tid).sub(k0[tid])
		ivcs := nivcsw(t, tid) - ivcs0[tid]
		// The snapshot's totals are the kernel's since watching began.
		if th.RunnableWaitSeconds != float64(k.delayNs)/1e9 || th.Preemptions != ivcs || th.Switches != k.slices {
			t.Errorf("tid %d: totals wait %.4fs preempt %d switches %d, kernel %.4fs %d %d", tid, th.RunnableWaitSeconds, th.Preemptions, th.Switches, float64(k.delayNs)/1e9, ivcs, k.slices)
		}
		checkTraced(t, tid, &th.Cumulative.Traced, k, ivcs)
		t.Logf("tid %d: run p50/p90 %.0f/%.0fus steal %.2f corunners %+v", tid, th.RunP50US, th.RunP90US, th.StealFraction, th.Corunners)
		// ...and are a scheduler slice: EEVDF's base slice (0.75-3 ms)
		// enforced at the tick (1-10 ms); never the whole 2 s.
		if th.RunP50US < 300 || th.RunP90US > 30000 {
			t.Errorf("tid %d: run p50 %.0fus p90 %.0fus, want a scheduler slice (0.3-30 ms)", tid, th.RunP50US, th.RunP90US)
		}
		if !th.Contended || th.ExpectedSliceUS == nil {
			t.Errorf("tid %d: not seen as contended", tid)
		}
		if len(th.Corunners) == 0 || th.Corunners[0].TGID != other {
			t.Errorf("tid %d: top corunner %+v, want the other loop (pid %d)", tid, th.Corunners, other)
		}
		// Both loops are the target's own processes: a stable key, not
		// the command name.
		if len(th.Corunners) > 0 && th.Corunners[0].Key != model.CorunnerSelf {
			t.Errorf("tid %d: top corunner key %q, want %q", tid, th.Corunners[0].Key, model.CorunnerSelf)
		}
		// The timeline has an interval for every switch-in counted (none
		// were dropped: the ring is far from full).
		if sw := th.Cumulative.Traced.Switches; snap.EventDrops == 0 && ins[uint32(tid)] != sw {
			t.Errorf("tid %d: %d switch-in events in the timeline, %d counted", tid, ins[uint32(tid)], sw)
		}
	}
	if _, err := m.Timeline("nope", time.Second); !errors.Is(err, ErrUnknownTarget) {
		t.Fatalf("timeline of unknown target: %v", err)
	}
}

// stoppedPair starts two busy loops on the last CPU and has m watch them
// as target "pair" while they are stopped: no wait is in flight, so the
// kernel's counters and the programs' cover the same intervals. Tests stop
// them again before reading, for the same reason.
func stoppedPair(t *testing.T, m *Monitor) (a, b *exec.Cmd) {
	t.Helper()
	cpu := runtime.NumCPU() - 1
	dir := makeCgroup(t, "pair", 0, 0)
	a, b = busyProcess(t, cpu), busyProcess(t, cpu)
	for _, c := range []*exec.Cmd{a, b} {
		write(t, filepath.Join(dir, "cgroup.procs"), strconv.Itoa(c.Process.Pid))
	}
	signalAndWait(t, unix.SIGSTOP, true, a, b)
	m.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{
		Kind: targets.KindPID, Name: "pair",
		Threads: []targets.Thread{{TID: a.Process.Pid, VCPU: 0}, {TID: b.Process.Pid, VCPU: 1}},
	}})
	return a, b
}

// checkTraced compares what the programs measured for a busy loop that
// was stopped whenever tracing started or ended with the kernel's
// accounting over the same time (k, ivcs).
func checkTraced(t *testing.T, tid int, tr *model.Traced, k schedStat, ivcs uint64) {
	t.Helper()
	kernelMeanRun := float64(k.runNs) / float64(max(1, k.slices)) / 1e3
	ourMeanRun := float64(tr.RunNs) / 1e3 / float64(max(1, tr.Switches))
	t.Logf("tid %d traced: run %.3fs (kernel %.3fs) runnable-wait %.3fs (kernel %.3fs) off %.3fs switches %d (kernel %d) preempt %d (kernel %d) mean run %.0fus (kernel %.0fus)",
		tid, float64(tr.RunNs)/1e9, float64(k.runNs)/1e9, float64(tr.RunnableWaitNs)/1e9, float64(k.delayNs)/1e9, float64(tr.OffCPUNs)/1e9,
		tr.Switches, k.slices, tr.Preemptions, ivcs, ourMeanRun, kernelMeanRun)
	if tr.Preemptions < 50 {
		t.Errorf("tid %d: %d preemptions traced while sharing a CPU, want many", tid, tr.Preemptions)
	}
	if !within(float64(tr.Preemptions), float64(ivcs), 0.05) {
		t.Errorf("tid %d: %d preemptions traced, kernel counted %d involuntary switches", tid, tr.Preemptions, ivcs)
	}
	if !within(float64(tr.RunnableWaitNs), float64(k.delayNs), 0.05) {
		t.Errorf("tid %d: runnable wait %.4fs, schedstat run_delay %.4fs: differ by more than 5%%", tid, float64(tr.RunnableWaitNs)/1e9, float64(k.delayNs)/1e9)
	}
	// A busy loop only sleeps while stopped, and the stopped intervals
	// are open when tracing starts and ends: all its off-CPU time is
	// runnable wait.
	if !within(float64(tr.OffCPUNs), float64(k.delayNs), 0.05) {
		t.Errorf("tid %d: off-CPU %.4fs, schedstat run_delay %.4fs: differ by more than 5%%", tid, float64(tr.OffCPUNs)/1e9, float64(k.delayNs)/1e9)
	}
	// Run intervals: the kernel's own mean slice (run time / number of
	// times it ran) and ours agree.
	if !within(ourMeanRun, kernelMeanRun, 0.05) {
		t.Errorf("tid %d: mean run %.0fus, kernel's %.0fus", tid, ourMeanRun, kernelMeanRun)
	}
}

// Trace windows: the programs are detached while the pair goes on
// running, then attached again. What they measure covers the windows and
// nothing of the gap (each attach forgets the intervals left open), and
// agrees with the kernel's accounting over the windows alone.
func TestTraceWindowsSkipTheGap(t *testing.T) {
	p := loadProbe(t)
	m := New(p, Options{Log: zerolog.Nop()})
	ca, cb := stoppedPair(t, m)
	a, b := ca.Process.Pid, cb.Process.Pid
	inWindows := map[int]schedStat{}
	ivcs := map[int]uint64{}
	run := func(traced bool) {
		k0 := map[int]schedStat{a: readSchedstat(t, a), b: readSchedstat(t, b)}
		iv0 := map[int]uint64{a: nivcsw(t, a), b: nivcsw(t, b)}
		if err := m.setTracing(traced); err != nil {
			t.Fatal(err)
		}
		signalAndWait(t, unix.SIGCONT, false, ca, cb)
		time.Sleep(time.Second)
		signalAndWait(t, unix.SIGSTOP, true, ca, cb)
		if !traced {
			return
		}
		for _, tid := range []int{a, b} {
			d := readSchedstat(t, tid).sub(k0[tid])
			w := inWindows[tid]
			inWindows[tid] = schedStat{w.runNs + d.runNs, w.delayNs + d.delayNs, w.slices + d.slices}
			ivcs[tid] += nivcsw(t, tid) - iv0[tid]
		}
	}
	m.traced.start(monoNow()) // what Run does
	run(true)
	run(false)
	run(true)
	if err := m.setTracing(false); err != nil {
		t.Fatal(err)
	}
	snap := m.Snapshot()
	if snap.Tracing || snap.TracedSeconds < 1.9 || snap.TracedSeconds > snap.WindowSeconds-0.9 {
		t.Errorf("tracing %v, traced %.2fs of %.2fs: want two 1 s windows and a 1 s gap", snap.Tracing, snap.TracedSeconds, snap.WindowSeconds)
	}
	for _, tid := range []int{a, b} {
		th := findThread(t, snap, tid)
		checkTraced(t, tid, &th.Cumulative.Traced, inWindows[tid], ivcs[tid])
		if th.OnCPU {
			t.Errorf("tid %d: on CPU between windows", tid)
		}
	}
}

// A periodic trace schedule attaches and detaches the programs by
// itself: distributions keep coming while the programs are attached only
// part of the time.
func TestTraceSchedule(t *testing.T) {
	p := loadProbe(t)
	m := New(p, Options{Log: zerolog.Nop(), TraceEvery: 300 * time.Millisecond, TraceWindow: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cpu := runtime.NumCPU() - 1
	ca, cb := busyProcess(t, cpu), busyProcess(t, cpu)
	m.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{
		Kind: targets.KindPID, Name: "pair",
		Threads: []targets.Thread{{TID: ca.Process.Pid, VCPU: 0}, {TID: cb.Process.Pid, VCPU: 1}},
	}})
	done := make(chan struct{})
	w := disturbance.Start()
	go func() { m.Run(ctx); close(done) }()
	time.Sleep(3 * time.Second)
	snap := m.Snapshot()
	cancel()
	<-done
	fig := w.Stop()
	t.Logf("traced %.2fs of %.2fs; the test process %v", snap.TracedSeconds, snap.WindowSeconds, fig)
	// A third of 3 s, give or take late timers. Each switch starts when
	// the last one is done, so a process kept from its CPU (attaching
	// the programs takes CPU time) stretches every window and gap.
	if snap.TracedSeconds < 0.5 || snap.TracedSeconds > 2 || snap.TracedSeconds > 0.6*snap.WindowSeconds {
		fig.Check(t, 0.05, fmt.Sprintf("traced %.2fs of %.2fs, want about a third", snap.TracedSeconds, snap.WindowSeconds))
	}
	for _, tg := range snap.Targets {
		for _, th := range tg.Threads {
			tr := th.Cumulative.Traced
			if th.RunP50US <= 0 || tr.Switches == 0 || tr.Switches >= th.Switches {
				t.Errorf("tid %d: run p50 %.0fus, %d switches traced of %d: want some, not all", th.TID, th.RunP50US, tr.Switches, th.Switches)
			}
		}
	}
}

// sleeperScript waits for a line on stdin, sleeps 1 ms 500 times (select
// with a timeout), prints "done" and waits for stdin to close. Perl is
// always there on Debian (perl-base is essential) and, unlike a Go child,
// has no runtime threads of its own that could preempt the sleeper.
const sleeperScript = `$| = 1; <STDIN>; select(undef, undef, undef, 0.001) for 1 .. 500; print "done\n"; <STDIN>;`

// A thread that sleeps and wakes is never switched out while runnable.
// It runs as SCHED_FIFO, so that other tenants of a shared test machine
// (including kernel threads such as rcu_preempt) do not preempt the
// microseconds it runs: that would be a real involuntary switch, which the
// kernel counts too, but not what this test is about.
func TestSleeperIsNotPreempted(t *testing.T) {
	p := loadProbe(t)
	m := New(p, Options{Log: zerolog.Nop()})
	cmd := exec.Command("perl", "-e", sleeperScript)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 50}
	if err := unix.SchedSetAttr(cmd.Process.Pid, &attr, 0); err != nil {
		t.Fatalf("making the sleeper SCHED_FIFO: %v", err)
	}
	out := bufio.NewScanner(stdout)
	tid := cmd.Process.Pid

	m.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: "sleeper", Threads: []targets.Thread{{TID: tid, VCPU: -1}}}})
	ivcs0 := nivcsw(t, tid)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if !out.Scan() || out.Text() != "done" {
		t.Fatalf("sleeper child did not finish: %q %v", out.Text(), out.Err())
	}
	th := findThread(t, m.Snapshot(), tid)
	ivcs := nivcsw(t, tid) - ivcs0
	tr := th.Cumulative.Traced
	t.Logf("sleeper: switches %d wakeups %d preemptions %d (kernel %d), traced %d %d %d, wake p50 %.1fus off p50 %.0fus",
		th.Switches, th.Wakeups, th.Preemptions, ivcs, tr.Switches, tr.Wakeups, tr.Preemptions, th.WakeP50US, th.OffCPUP50US)
	// A sleep whose timer fires before the thread gets to sleep makes no
	// switch: a few of the 500 may be missing.
	if th.Switches < 490 || th.Wakeups < 490 || tr.Switches < 490 || tr.Wakeups < 490 {
		t.Fatalf("switches %d wakeups %d, traced %d %d: the sleeps were not seen", th.Switches, th.Wakeups, tr.Switches, tr.Wakeups)
	}
	if tr.Preemptions != 0 || ivcs != 0 {
		t.Errorf("sleeping thread: %d involuntary preemptions traced (kernel counted %d)", tr.Preemptions, ivcs)
	}
	if th.WakeP50US <= 0 {
		t.Errorf("wake p50 %.1fus: no wake-to-run latency measured", th.WakeP50US)
	}
	if th.OffCPUP50US < 900 {
		t.Errorf("off-CPU p50 %.0fus, want about the 1 ms sleep", th.OffCPUP50US)
	}
	if th.Contended || th.ExpectedSliceUS != nil {
		t.Errorf("sleeper seen as contended: %+v", th)
	}
}

// makeCgroup creates a cgroup on whatever hierarchy has the cpu
// controller (pure cgroup v2, or v1) with the highest CPU weight, so the
// test's processes win their CPU from other tenants of a shared machine,
// and, if quota > 0, CPU bandwidth quota/period (µs).
func makeCgroup(t *testing.T, suffix string, quota, period int) string {
	t.Helper()
	name := fmt.Sprintf("vgpu-probe-test-%d-%s", os.Getpid(), suffix)
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "cpu") {
		_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+cpu"), 0)
		dir := filepath.Join("/sys/fs/cgroup", name)
		mkCgroup(t, dir)
		write(t, filepath.Join(dir, "cpu.weight"), "10000")
		if quota > 0 {
			write(t, filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, period))
		}
		return dir
	}
	for _, root := range []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"} {
		if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		dir := filepath.Join(root, name)
		mkCgroup(t, dir)
		write(t, filepath.Join(dir, "cpu.shares"), "262144")
		if quota > 0 {
			write(t, filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(period))
			write(t, filepath.Join(dir, "cpu.cfs_quota_us"), strconv.Itoa(quota))
		}
		return dir
	}
	t.Skip("no cgroup hierarchy with the cpu controller")
	return ""
}

// cpuStat reads a field of a cgroup's cpu.stat (v1 and v2 both have
// nr_throttled).
func cpuStat(t *testing.T, dir, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatalf("reading cpu.stat: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == field {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in %s/cpu.stat", field, dir)
	return 0
}

// stopped sends sig to the processes and waits until each is in state
// want ('T' stopped, or anything but 'T' after SIGCONT).
func signalAndWait(t *testing.T, sig unix.Signal, stopped bool, cmds ...*exec.Cmd) {
	t.Helper()
	for _, c := range cmds {
		if err := c.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range cmds {
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			// state is the field after "(comm)".
			st := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))[0]
			if (st == "T") == stopped {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still in state %s after %v", c.Process.Pid, st, sig)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
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
	dir := makeCgroup(t, "quota", quotaUS, periodUS)

	cmd := busyProcess(t, 0)
	write(t, filepath.Join(dir, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid))

	src, err := targets.NewCgroup(dir, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	m := New(p, Options{Log: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow(ctx, m, src)
	go m.Run(ctx)
	if err := m.WaitTargets(ctx, 1); err != nil {
		t.Fatal(err)
	}
	thr0 := cpuStat(t, dir, "nr_throttled")
	time.Sleep(2 * time.Second)
	snap := m.Snapshot()
	thrKernel := cpuStat(t, dir, "nr_throttled") - thr0
	if len(snap.Targets) != 1 || snap.Targets[0].QuotaUS != quotaUS || snap.Targets[0].PeriodUS != periodUS {
		t.Fatalf("cgroup target %+v: quota not read", snap.Targets)
	}
	th := findThread(t, snap, cmd.Process.Pid)
	t.Logf("kernel nr_throttled %d", thrKernel)
	t.Logf("quota thread: quota-run p50 %.0fus throttles %d run p50/p90 %.0f/%.0fus slice p50 %.0fus preempt %d expected slice %v corunners %+v",
		th.QuotaRunP50US, th.Throttles, th.RunP50US, th.RunP90US, th.SliceP50US, th.Preemptions, deref(th.ExpectedSliceUS), th.Corunners)
	// Other tenants of this CPU may cut the runs short, but the CPU time
	// between two throttles is the quota.
	if !within(th.QuotaRunP50US, quotaUS, 0.25) {
		t.Errorf("run between throttles p50 %.0fus, want the %dus quota", th.QuotaRunP50US, quotaUS)
	}
	// 2 s at one throttle per 100 ms period, as the kernel counted them
	// (the first and last may fall on either side of the reads).
	if th.Throttles < 15 || !within(float64(th.Throttles), float64(thrKernel), 0.1) {
		t.Errorf("%d throttles in 2s, kernel counted %d, want ~20", th.Throttles, thrKernel)
	}
	if th.ExpectedSliceUS == nil || *th.ExpectedSliceUS > quotaUS*1.25 {
		t.Errorf("expected slice %v, want at most the ~%dus quota", deref(th.ExpectedSliceUS), quotaUS)
	}
}

func deref(p *float64) any {
	if p == nil {
		return "inf"
	}
	return *p
}

// follow applies src's events to m until ctx ends, as agent/assembly
// applies its sources' to the monitor.
func follow(ctx context.Context, m *Monitor, src targets.Source) {
	go func() {
		for ev := range src.Run(ctx) {
			m.Apply(ev)
		}
	}()
}
