//go:build linux

package monitor

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// The agent's cost. Run with
//
//	go test -run '^$' -bench . -benchtime 1x ./agent/monitor/
//
// Each benchmark measures for costSeconds (env VGPU_PROBE_BENCH_SECONDS,
// default 10; sampled cases at least two trace periods) a child process
// whose two threads, pinned to one CPU, hand a byte back and forth over
// pipes: every hand-off is a context switch between two watched threads
// (tens of thousands per second).

const pingPongEnv = "VGPU_PROBE_PINGPONG_CPU"

func TestMain(m *testing.M) {
	if cpu := os.Getenv(pingPongEnv); cpu != "" {
		n, _ := strconv.Atoi(cpu)
		spin, _ := strconv.Atoi(os.Getenv(pingPongEnv + "_SPIN_US"))
		pingPong(n, spin)
		return
	}
	os.Exit(m.Run())
}

// pingPong runs forever: two OS threads on one CPU, blocking reads on raw
// pipes (no Go netpoller), so each hand-off is a kernel context switch.
// Each side spins spinUS µs before handing off, to pace the switch rate
// (0: as fast as the kernel can switch).
func pingPong(cpu int, spinUS int) {
	var ab, ba [2]int
	if err := unix.Pipe(ab[:]); err != nil {
		panic(err)
	}
	if err := unix.Pipe(ba[:]); err != nil {
		panic(err)
	}
	side := func(in, out int, first bool) {
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		_ = unix.SchedSetaffinity(0, &set)
		buf := []byte{0}
		if first {
			_, _ = unix.Write(out, buf)
		}
		spin := time.Duration(spinUS) * time.Microsecond
		for {
			if _, err := unix.Read(in, buf); err != nil {
				os.Exit(1)
			}
			for t0 := time.Now(); time.Since(t0) < spin; {
			}
			if _, err := unix.Write(out, buf); err != nil {
				os.Exit(1)
			}
		}
	}
	// VGPU_PROBE_PINGPONG_HINTS=DIR: the process reads its hint page in
	// DIR as an application with libhybridsync does (the agent's --hints
	// DIR), so that it holds its live array.
	if dir := os.Getenv(pingPongEnv + "_HINTS"); dir != "" {
		go func() {
			h := signal.NewHintSource(filepath.Join(dir, hintpage.FileName(strconv.Itoa(os.Getpid()))), nil, nil)
			for {
				h.Remaining(unix.Gettid(), clock.Now())
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	go side(ba[0], ab[1], true)
	side(ab[0], ba[1], false)
}

func costSeconds() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("VGPU_PROBE_BENCH_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 10 * time.Second
}

func startPingPong(b *testing.B, spinUS int) *exec.Cmd {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), pingPongEnv+"="+strconv.Itoa(runtime.NumCPU()-1), pingPongEnv+"_SPIN_US="+strconv.Itoa(spinUS))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(300 * time.Millisecond) // threads started and pinned
	return cmd
}

func rusage(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rssKiB(b *testing.B) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return n
		}
	}
	return 0
}

func benchProbe(b *testing.B, opts bpfload.Options) *bpfload.Probe {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("loading eBPF programs needs root")
	}
	opts.Log = zerolog.Nop()
	p, err := bpfload.Load(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	// Count time spent in BPF programs for as long as this fd is open.
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enabling BPF stats: %v", err)
	}
	b.Cleanup(func() { st.Close() })
	return p
}

// switches counts the switch-ins of the threads, as the kernel does (the
// programs see only those in trace windows).
func switches(b *testing.B, tids []targets.Thread) uint64 {
	var n uint64
	for _, th := range tids {
		c, err := procstat.Read(th.TID)
		if err != nil {
			b.Fatal(err)
		}
		n += c.Timeslices
	}
	return n
}

// The agent's default trace schedule (cmd/vgpu-probe/agent).
const defaultTraceEvery, defaultTraceWindow = 10 * time.Second, time.Second

// watchPingPong starts the ping-pong pair and a monitor (run until the
// benchmark ends) that watches it.
func watchPingPong(b *testing.B, p Probe, spinUS int, opts Options) (*Monitor, []targets.Thread) {
	b.Helper()
	child := startPingPong(b, spinUS)
	src, err := targets.NewPID(child.Process.Pid, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	opts.Log = zerolog.Nop()
	m := New(p, opts)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	follow(ctx, m, src)
	go m.Run(ctx)
	if err := m.WaitTargets(ctx, 1); err != nil {
		b.Fatal(err)
	}
	tg, err := src.Scan()
	if err != nil {
		b.Fatal(err)
	}
	return m, tg.Threads
}

// BenchmarkAgentCost: the whole agent (events on, the monitor reading the
// ring buffer into its timeline, a snapshot and a sample every second like
// a 1 s Prometheus scrape) while two watched threads switch tens of
// thousands of times per second, with the default trace schedule
// (sampled: attached 1 s in 10) and attached throughout (continuous).
// Reports the agent process's CPU and the CPU spent in the BPF programs
// (charged to whichever task was switching), both in % of one core. The
// kernel's BPF accounting misses the tracepoint's own dispatch cost:
// BenchmarkSwitchCost measures all of it.
func BenchmarkAgentCost(b *testing.B) {
	for _, c := range []struct {
		name   string
		spinUS int
		every  time.Duration
	}{
		// ~30k switches/s: the "20k+" operating point.
		{"paced/sampled", 30, defaultTraceEvery},
		{"paced/continuous", 30, 0},
		// As fast as the kernel switches: the worst case.
		{"max/sampled", 0, defaultTraceEvery},
		{"max/continuous", 0, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := benchProbe(b, bpfload.Options{Events: true})
			m, threads := watchPingPong(b, p, c.spinUS, Options{SampleEvery: time.Second, TraceEvery: c.every, TraceWindow: defaultTraceWindow})
			dur := costSeconds()
			if c.every > 0 {
				// Whole periods, so the windows are their share.
				dur = max(2, (dur+c.every-1)/c.every) * c.every
			}
			for i := 0; i < b.N; i++ {
				sw0 := switches(b, threads)
				traced0 := m.Snapshot().TracedTotalSeconds
				bpf0, runs0, _ := p.ProgramStats()
				cpu0, t0 := rusage(b), time.Now()
				for time.Since(t0) < dur {
					time.Sleep(time.Second)
					_ = m.Snapshot() // what a scrape costs
				}
				wall := time.Since(t0)
				cpu := rusage(b) - cpu0
				bpfT, runs, _ := p.ProgramStats()
				sw := switches(b, threads) - sw0
				drops, _ := p.Drops()
				b.ReportMetric((m.Snapshot().TracedTotalSeconds-traced0)/wall.Seconds(), "traced-fraction")
				b.ReportMetric(float64(sw)/wall.Seconds(), "watched-switches/s")
				b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "agent-cpu-%")
				b.ReportMetric(100*(bpfT-bpf0).Seconds()/wall.Seconds(), "bpf-cpu-%")
				b.ReportMetric(float64((bpfT-bpf0).Nanoseconds())/float64(max(1, runs-runs0)), "ns/prog-run")
				b.ReportMetric(float64(runs-runs0)/wall.Seconds(), "prog-runs/s")
				b.ReportMetric(float64(drops), "drops")
			}
		})
	}
}

// BenchmarkRingOverload: nobody reads the ring buffer while the watched
// threads switch at full speed. The 1 MiB ring fills, further events are
// dropped and counted, and memory stays where it was.
func BenchmarkRingOverload(b *testing.B) {
	p := benchProbe(b, bpfload.Options{Events: true})
	child := startPingPong(b, 0)
	tg, err := targets.NewPID(child.Process.Pid, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	target, _ := tg.Scan()
	for _, th := range target.Threads {
		if err := p.Watch(uint32(th.TID)); err != nil {
			b.Fatal(err)
		}
	}
	dur := costSeconds()
	for i := 0; i < b.N; i++ {
		rss0 := rssKiB(b)
		d0, _ := p.Drops()
		sw0 := switches(b, target.Threads)
		t0 := time.Now()
		time.Sleep(dur)
		wall := time.Since(t0)
		d, _ := p.Drops()
		sw := switches(b, target.Threads) - sw0
		b.ReportMetric(float64(sw)/wall.Seconds(), "watched-switches/s")
		// One record (64 bytes) per switch-in; the 1 MiB ring holds
		// ~16k of them.
		b.ReportMetric(float64(d-d0)/wall.Seconds(), "drops/s")
		b.ReportMetric(float64(d-d0)/float64(sw), "dropped-fraction")
		b.ReportMetric(rssKiB(b)-rss0, "rss-growth-KiB")
		if d == d0 {
			b.Errorf("ring buffer never overflowed in %v: drops not counted", wall)
		}
	}
}

// BenchmarkUnwatched: what every context switch of the host pays while
// the programs are attached but the switching threads are not watched
// (the lookups and nothing else).
func BenchmarkUnwatched(b *testing.B) {
	p := benchProbe(b, bpfload.Options{Events: true})
	startPingPong(b, 0)
	dur := costSeconds()
	for i := 0; i < b.N; i++ {
		r0, n0, _ := p.ProgramStats()
		t0 := time.Now()
		time.Sleep(dur)
		wall := time.Since(t0)
		r, n, _ := p.ProgramStats()
		b.ReportMetric(float64((r-r0).Nanoseconds())/float64(max(1, n-n0)), "ns/prog-run")
		b.ReportMetric(float64(n-n0)/wall.Seconds(), "prog-runs/s")
		b.ReportMetric(100*(r-r0).Seconds()/wall.Seconds(), "bpf-cpu-%")
	}
}

// BenchmarkSwitchCost: what the attached programs add to every context
// switch, all of it (the tracepoint's dispatch included, which the
// kernel's BPF accounting leaves out), measured the only way that sees
// it: the pair switches as fast as it can on its CPU, and its hand-off
// rate is compared with the programs attached (both threads watched) and
// detached, in alternating one-second blocks, median of the pairs. With
// the programs attached a fraction f of the time, a host switching R
// times a second pays f * R * added-ns/switch.
func BenchmarkSwitchCost(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("loading eBPF programs needs root")
	}
	p, err := bpfload.Load(bpfload.Options{Events: true, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	m, threads := watchPingPong(b, p, 0, Options{})
	rate := func(attached bool) float64 {
		if err := m.setTracing(attached); err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // settle
		sw0, t0 := switches(b, threads), time.Now()
		time.Sleep(time.Second)
		return float64(switches(b, threads)-sw0) / time.Since(t0).Seconds()
	}
	blocks := max(3, int(costSeconds()/(2*time.Second)))
	for i := 0; i < b.N; i++ {
		var added, on, off []float64
		for range blocks {
			r0, r1 := rate(false), rate(true)
			off, on = append(off, r0), append(on, r1)
			added = append(added, 1e9/r1-1e9/r0)
		}
		b.ReportMetric(median(added), "added-ns/switch")
		b.ReportMetric(median(off), "switches/s-detached")
		b.ReportMetric(median(on), "switches/s-attached")
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
