package hints

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/experiments/cgroup"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// staticSource reports one target once.
type staticSource struct{ t targets.Target }

func (s staticSource) Run(ctx context.Context) <-chan targets.Event {
	ch := make(chan targets.Event, 1)
	ch <- targets.Event{Kind: targets.Added, Target: s.t}
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

type sample struct{ at, remaining, slice int64 }

// e2eSeconds: VGPU_PROBE_HINTS_SECONDS runs the measurement longer (the
// numbers in docs/BENCHMARKS.md); the default keeps CI short.
func e2eSeconds() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("VGPU_PROBE_HINTS_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 2 * time.Second
}

// TestEndToEndHints: a thread shares its CPU with a while(1) co-runner (or
// runs under a 10 ms / 20 ms quota) while a real agent pipeline (BPF
// programs, monitor, publisher) publishes its page and the thread reads it
// through hybridsync.HintSource. It reports how far the hinted remaining
// slice was from when the thread was actually descheduled (as the BPF
// programs saw it), and the switch-in-to-page delay. No timing assertions:
// it checks only that real hints were read.
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
	pub, err := New(Options{Dir: t.TempDir(), Log: zerolog.Nop(), Counters: probe})
	if err != nil {
		t.Fatal(err)
	}
	cpu := runtime.NumCPU() - 1

	var (
		mu   sync.Mutex
		outs []int64 // switch-outs of the thread that were involuntary
	)
	tidc := make(chan int)
	start := make(chan struct{})
	res := make(chan []sample)
	go spinner(t, cpu, pub, tidc, start, res, e2eSeconds())
	tid := <-tidc

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
		g, err := cgroup.Create("vgpu-probe-hints-e2e", 10*time.Millisecond, 20*time.Millisecond)
		if err != nil {
			t.Skipf("no cgroup CPU bandwidth control: %v", err)
		}
		defer g.Remove()
		// One thread, not the test process: cgroup v1 takes tids in tasks.
		if err := os.WriteFile(filepath.Join(g.Path, "tasks"), []byte(strconv.Itoa(tid)), 0); err != nil {
			t.Skipf("cannot move one thread into a cgroup (v2 without threaded mode): %v", err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	mo := monitor.Options{Log: zerolog.Nop(), OnEvent: func(ev *bpf.SchedSwitchEvent) {
		if int(ev.Tid) == tid && ev.Preempted != 0 && ev.OffNs > 0 {
			mu.Lock()
			outs = append(outs, int64(ev.InNs-ev.OffNs))
			mu.Unlock()
		}
		pub.OnEvent(ev)
	}}
	m := monitor.New(probe, mo)
	src := Tee(staticSource{targets.Target{Kind: targets.KindPID, Name: "e2e-" + scenario,
		Threads: []targets.Thread{{TID: tid, VCPU: -1}}}}, pub)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, src) }()
	go pub.Run(ctx)
	if err := m.WaitTargets(ctx, 1); err != nil {
		t.Fatal(err)
	}
	close(start)
	samples := <-res
	cancel()
	<-done

	mu.Lock()
	defer mu.Unlock()
	errs, used := compare(samples, outs)
	lag := pub.Lag()
	t.Logf("%s: %d hinted reads of %d, %d involuntary switch-outs, %d compared", scenario, used, len(samples), len(outs), len(errs))
	if len(errs) > 0 {
		t.Logf("%s: |hinted remaining - actual| / slice: p50 %.3f p90 %.3f p99 %.3f", scenario, q(errs, .5), q(errs, .9), q(errs, .99))
	}
	if len(lag) > 0 {
		l := make([]float64, len(lag))
		for i, v := range lag {
			l[i] = float64(v) / 1e3
		}
		t.Logf("%s: switch-in to page, µs: p50 %.1f p90 %.1f p99 %.1f max %.1f (%d)", scenario, q(l, .5), q(l, .9), q(l, .99), q(l, 1), len(l))
	}
	if used == 0 {
		t.Fatal("the thread never read a hint from the page")
	}
}

// spinner is the benchmark thread: pinned to cpu, it reads its remaining
// slice from the page every ~20 µs for d.
func spinner(t *testing.T, cpu int, pub *Publisher, tidc chan<- int, start <-chan struct{}, res chan<- []sample, d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Error(err)
	}
	tid := unix.Gettid()
	tidc <- tid
	<-start
	path := pub.Path("e2e-" + map[bool]string{true: "while1", false: "cap"}[hasPage(pub, "e2e-while1")])
	h := hybridsync.NewHintSource(path, &hybridsync.GuestEstimator{}, nil)
	f, _ := hintpage.Map(path)
	var out []sample
	end := hybridsync.Now() + int64(d)
	for now := hybridsync.Now(); now < end; now = hybridsync.Now() {
		r := h.Remaining(tid, now)
		var s hintpage.Slot
		if f != nil && f.FindTID(tid, &s) == nil && s.ExpectedSliceNs != 0 && s.ExpectedSliceNs != hintpage.Infinite && r != hybridsync.Infinite {
			out = append(out, sample{at: now, remaining: r, slice: int64(s.ExpectedSliceNs)})
		} else {
			out = append(out, sample{at: now, remaining: -1})
		}
		for until := now + 20_000; hybridsync.Now() < until; {
		}
	}
	res <- out
}

func hasPage(p *Publisher, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.pages["pid/"+name]
	return ok
}

// compare matches each hinted read with the next involuntary switch-out
// and returns |hinted - actual| / slice; reads followed by a voluntary or
// no switch-out within two slices are left out.
func compare(samples []sample, outs []int64) (errs []float64, used int) {
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
	}
	return errs, used
}

func q(v []float64, p float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[min(len(v)-1, int(p*float64(len(v))))]
}
