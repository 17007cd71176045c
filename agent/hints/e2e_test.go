package hints

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

type sample struct{ at, remaining, slice int64 }

// e2eSeconds: VGPU_PROBE_HINTS_SECONDS runs the measurement longer (the
// numbers in docs/BENCHMARKS.md, "Hint pages", "Accuracy and
// visibility"); the default keeps CI short.
func e2eSeconds() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("VGPU_PROBE_HINTS_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 2 * time.Second
}

// readerPriority: VGPU_PROBE_HINTS_READER=normal measures the pipeline
// with the event reader as an ordinary thread (the default is real-time).
func readerPriority() int {
	if os.Getenv("VGPU_PROBE_HINTS_READER") == "normal" {
		return -1
	}
	return 0
}

// TestMain runs the reading process of TestEndToEndHints when it is
// started as one (VGPU_PROBE_HINTS_READ set), the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("VGPU_PROBE_HINTS_READ") != "" {
		os.Exit(reader())
	}
	if os.Getenv("VGPU_PROBE_LIVE_PEER") != "" {
		os.Exit(livePeer())
	}
	os.Exit(m.Run())
}

// TestEndToEndHints: a thread shares its CPU with a while(1) co-runner (or
// runs under a 10 ms / 20 ms quota) while a real agent pipeline (BPF
// programs, monitor, publisher) publishes its page and the thread reads it
// through signal.HintSource. It reports how far the hinted remaining
// slice was from when the thread was actually descheduled (as the BPF
// programs saw it), and the switch-in-to-page delay. No timing assertions:
// it checks only that real hints were read.
//
// The reading thread is in a process of its own (this test binary started
// again), as an application is: in the agent's process its Go runtime
// would share the agent's (a P held by a thread that spins, or is
// throttled for 10 ms, delays the reader and stops the world for the
// collector; the runtime's own threads wake up on its CPU).
func TestEndToEndHints(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the eBPF scheduler programs")
	}
	for _, sc := range []string{"while1", "cap"} {
		t.Run(sc, func(t *testing.T) { runE2E(t, sc) })
	}
}

func runE2E(t *testing.T, scenario string) {
	probe, err := bpfload.Load(bpfload.Options{Events: true, WakeEveryEvent: true, Log: zerolog.Nop()})
	if err != nil {
		t.Skipf("cannot load the eBPF programs here: %v", err)
	}
	defer probe.Close()
	if err := ebpfStats(t); err != nil {
		t.Logf("no BPF run-time stats: %v", err)
	}
	pub, err := New(Options{Dir: t.TempDir(), Log: zerolog.Nop(), Counters: probe})
	if err != nil {
		t.Fatal(err)
	}
	cpu := runtime.NumCPU() - 1

	var (
		mu   sync.Mutex
		outs []int64 // switch-outs of the thread that were involuntary
		long []int64 // of them, those it was off its CPU 100 µs or more after
		// of them: by the quota, and to this process (the agent's own
		// threads: the reader, the refresh, the Go runtime's)
		throttled, bySelf int
	)
	self := uint32(os.Getpid())
	name := "e2e-" + scenario
	rd, err := startReader(t, pub.Path(name), cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.stop()
	tid := rd.tid

	switch scenario {
	case "while1":
		co := exec.Command("sh", "-c", "while :; do :; done")
		if err := co.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { co.Process.Kill(); co.Wait() }()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(co.Process.Pid, &set); err != nil {
			t.Fatal(err)
		}
	case "cap":
		g, err := cpucap.Create("vgpu-probe-hints-e2e", 10*time.Millisecond, 20*time.Millisecond)
		if err != nil {
			t.Skipf("no cgroup CPU bandwidth control: %v", err)
		}
		defer g.Remove()
		// The reading thread alone: its process's other threads (the
		// Go runtime's) would spend the quota at times of their own.
		if err := g.AddThread(rd.cmd.Process.Pid, tid); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	mo := monitor.Options{Log: zerolog.Nop(), ReaderPriority: readerPriority(), OnEvent: func(ev *bpf.SchedSwitchEvent) {
		if int(ev.Tid) == tid && ev.Preempted != 0 && ev.OffNs > 0 {
			mu.Lock()
			outs = append(outs, int64(ev.InNs-ev.OffNs))
			if ev.OffNs >= contention.QuietOffNs {
				long = append(long, int64(ev.InNs-ev.OffNs))
			}
			if ev.Throttled != 0 {
				throttled++
			}
			if ev.OtherTgid == self {
				bySelf++
			}
			mu.Unlock()
		}
		pub.OnEvent(ev)
	}}
	m := monitor.New(probe, mo)
	// The publisher first, then the monitor, as agent/assembly applies a
	// change of the targets.
	ev := targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: name,
		Threads: []targets.Thread{{TID: tid, VCPU: -1}}}}
	pub.Apply(ev)
	m.Apply(ev)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	go pub.Run(ctx)
	if err := m.WaitTargets(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cpu0 := processCPU()
	samples, err := rd.run()
	cpu1 := processCPU()
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	errs, abs, used := compare(samples, outs)
	lag := pub.Lag()
	t.Logf("%s: event reader %s; %d hinted reads of %d, %d involuntary switch-outs, %d compared", scenario,
		map[bool]string{true: "real-time", false: "ordinary"}[readerPriority() >= 0], used, len(samples), len(outs), len(errs))
	t.Logf("%s: of the switch-outs, %d by the quota, %d to this process (the agent)", scenario, throttled, bySelf)
	if len(errs) > 0 {
		t.Logf("%s: |hinted remaining - actual| / slice: p50 %.3f p90 %.3f p99 %.3f", scenario, q(errs, .5), q(errs, .9), q(errs, .99))
		t.Logf("%s: |hinted remaining - actual|, µs: p50 %.0f p90 %.0f p99 %.0f", scenario, q(abs, .5), q(abs, .9), q(abs, .99))
	}
	// The same against the switch-outs that took the CPU away for 100 µs
	// or more: interruptions of a few µs (the Go runtime's threads, a
	// kworker) do not end a slice.
	if errs, _, _ := compare(samples, long); len(errs) > 0 {
		t.Logf("%s: the same against the %d switch-outs of 100 µs or more: p50 %.3f p90 %.3f p99 %.3f (%d compared)", scenario, len(long), q(errs, .5), q(errs, .9), q(errs, .99), len(errs))
	}
	if secs := e2eSeconds().Seconds(); cpu1 > cpu0 {
		t.Logf("%s: CPU of this process (the agent's pipeline): %.1f ms/s", scenario, float64(cpu1-cpu0)/1e6/secs)
	}
	if len(lag) > 0 {
		l := make([]float64, len(lag))
		for i, v := range lag {
			l[i] = float64(v) / 1e3
		}
		t.Logf("%s: switch-in to page, µs: p50 %.1f p90 %.1f p99 %.1f max %.1f (%d; %d not woken for: after interruptions under 100 µs, or uncontended)", scenario, q(l, .5), q(l, .9), q(l, .99), q(l, 1), len(l), pub.Quiet())
	}
	mapped, served, refused := pub.LiveStats()
	t.Logf("%s: live array: %d of %d hinted reads took the live block from it; connections served %d, refused %d; threads mapped at the end %d",
		scenario, rd.fromArray, used, served, refused, mapped)
	if h, err := probe.HintSlot(uint32(tid)); err == nil {
		t.Logf("%s: live blocks written by the programs: %d", scenario, h.Writes)
	}
	if len(rd.seen) > 0 {
		t.Logf("%s: switch-in to visible in the reader (first read that saw it; reads every 20 µs), µs: p50 %.1f p90 %.1f p99 %.1f max %.1f (%d switch-ins)",
			scenario, q(rd.seen, .5), q(rd.seen, .9), q(rd.seen, .99), q(rd.seen, 1), len(rd.seen))
	}
	if rt, runs, err := probe.ProgramStats(); err == nil && runs > 0 {
		t.Logf("%s: BPF programs: %d runs, %.0f ns each, %.2f ms/s", scenario, runs, float64(rt)/float64(runs), float64(rt)/1e6/e2eSeconds().Seconds())
	}
	if used == 0 {
		t.Fatal("the thread never read a hint from the page")
	}
}

// readerProc is the reading process, started and waiting for "go".
type readerProc struct {
	cmd *exec.Cmd
	tid int
	in  io.WriteCloser
	out string

	fromArray int       // samples whose live block came from the live array
	seen      []float64 // switch-in to the first read that saw it, µs
}

// startReader starts this test binary again as the reading process: its
// reading thread pinned to cpu, the page at path. It returns once the
// thread's tid is known.
func startReader(t *testing.T, path string, cpu int) (*readerProc, error) {
	out := filepath.Join(t.TempDir(), "samples")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VGPU_PROBE_HINTS_READ="+path, "VGPU_PROBE_HINTS_CPU="+strconv.Itoa(cpu),
		"VGPU_PROBE_HINTS_OUT="+out, "VGPU_PROBE_HINTS_SECONDS="+strconv.Itoa(int(e2eSeconds().Seconds())))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &readerProc{cmd: cmd, in: in, out: out}
	sc := bufio.NewScanner(stdout)
	if sc.Scan() {
		_, err = fmt.Sscanf(sc.Text(), "tid %d", &r.tid)
	}
	if r.tid == 0 {
		r.stop()
		return nil, fmt.Errorf("reading process did not start: %q %v", sc.Text(), err)
	}
	go io.Copy(io.Discard, stdout)
	return r, nil
}

// run lets the reading process read for its time and returns its samples.
func (r *readerProc) run() ([]sample, error) {
	if _, err := io.WriteString(r.in, "go\n"); err != nil {
		return nil, err
	}
	if err := r.cmd.Wait(); err != nil {
		return nil, fmt.Errorf("reading process: %w", err)
	}
	b, err := os.ReadFile(r.out)
	if err != nil {
		return nil, err
	}
	s := make([]sample, len(b)/40)
	for i := range s {
		v := b[40*i:]
		le := binary.LittleEndian
		s[i] = sample{at: int64(le.Uint64(v)), remaining: int64(le.Uint64(v[8:])), slice: int64(le.Uint64(v[16:]))}
		if seen := int64(le.Uint64(v[24:])); seen >= 0 {
			r.seen = append(r.seen, float64(seen)/1e3)
		}
		if le.Uint64(v[32:]) != 0 && s[i].remaining >= 0 {
			r.fromArray++
		}
	}
	return s, nil
}

func (r *readerProc) stop() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// reader is the reading process: its thread, pinned to its CPU, says its
// tid, waits for "go", then reads its remaining slice from the page every
// ~20 µs for the measurement's time and writes what it read.
func reader() int {
	runtime.LockOSThread()
	cpu, _ := strconv.Atoi(os.Getenv("VGPU_PROBE_HINTS_CPU"))
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tid := unix.Gettid()
	fmt.Printf("tid %d\n", tid)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	path := os.Getenv("VGPU_PROBE_HINTS_READ")
	h := signal.NewHintSource(path, &signal.GuestEstimator{}, nil)
	type rec struct {
		sample
		seen int64
		live bool
	}
	out := make([]rec, 0, int(e2eSeconds()/(20*time.Microsecond)))
	end := clock.Now() + int64(e2eSeconds())
	var lastIn uint64
	for now := clock.Now(); now < end; now = clock.Now() {
		r := h.Remaining(tid, now)
		var s hintpage.Slot
		live, ok := h.ReadSlot(tid, now, &s)
		rc := rec{sample: sample{at: now, remaining: -1}, seen: -1, live: live}
		if ok && s.SwitchInNs != lastIn && s.State == hintpage.StateRunning {
			if lastIn != 0 {
				rc.seen = now - int64(s.SwitchInNs)
			}
			lastIn = s.SwitchInNs
		}
		if ok && s.ExpectedSliceNs != 0 && s.ExpectedSliceNs != hintpage.Infinite && r != clock.Infinite {
			rc.sample = sample{at: now, remaining: r, slice: int64(s.ExpectedSliceNs)}
		}
		out = append(out, rc)
		for until := now + 20_000; clock.Now() < until; {
		}
	}
	b := make([]byte, 0, 40*len(out))
	for _, s := range out {
		b = binary.LittleEndian.AppendUint64(b, uint64(s.at))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.remaining))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.slice))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.seen))
		var l uint64
		if s.live {
			l = 1
		}
		b = binary.LittleEndian.AppendUint64(b, l)
	}
	if err := os.WriteFile(os.Getenv("VGPU_PROBE_HINTS_OUT"), b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// compare matches each hinted read with the next involuntary switch-out
// and returns |hinted - actual| / slice and |hinted - actual| in µs; reads
// followed by a voluntary or no switch-out within two slices are left out.
func compare(samples []sample, outs []int64) (errs, abs []float64, used int) {
	slices.Sort(outs)
	for _, s := range samples {
		if s.remaining < 0 {
			continue
		}
		used++
		i, _ := slices.BinarySearch(outs, s.at)
		if i == len(outs) || outs[i]-s.at > 2*s.slice {
			continue
		}
		actual := outs[i] - s.at
		e := float64(s.remaining-actual) / float64(s.slice)
		errs = append(errs, max(e, -e))
		d := float64(s.remaining-actual) / 1e3
		abs = append(abs, max(d, -d))
	}
	return errs, abs, used
}

// processCPU is the CPU time of this process, ns.
func processCPU() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func q(v []float64, p float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[min(len(v)-1, int(p*float64(len(v))))]
}

// ebpfStats turns on the kernel's BPF run-time accounting for the test.
func ebpfStats(t *testing.T) error {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return err
	}
	t.Cleanup(func() { c.Close() })
	return nil
}
