//go:build linux

package bpfload

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// loadOrSkip loads the real programs; it skips only when the test cannot
// load BPF at all (not root, or a kernel without BPF), and says why.
func loadOrSkip(t *testing.T, opts Options) *Probe {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading eBPF programs needs root")
	}
	p, err := Load(opts)
	if errors.Is(err, ErrPermission) {
		t.Skipf("kernel does not let root load BPF: %v", err)
	}
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestEventLayout(t *testing.T) {
	var ev bpf.SchedSwitchEvent
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"OffNs", unsafe.Offsetof(ev.OffNs), 8},
		{"RunNs", unsafe.Offsetof(ev.RunNs), 16},
		{"Tid", unsafe.Offsetof(ev.Tid), 24},
		{"OtherTgid", unsafe.Offsetof(ev.OtherTgid), 36},
		{"Preempted", unsafe.Offsetof(ev.Preempted), 40},
		{"Waited", unsafe.Offsetof(ev.Waited), 42},
		{"Woken", unsafe.Offsetof(ev.Woken), 43},
		{"OtherComm", unsafe.Offsetof(ev.OtherComm), 48},
		{"size", unsafe.Sizeof(ev), 64},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, decodeEvent assumes %d", f.name, f.got, f.want)
		}
	}
	if err := decodeEvent(make([]byte, 10), &ev); !errors.Is(err, ErrShortRecord) {
		t.Fatalf("short record: got %v", err)
	}
}

// TestWatchSleeper loads the programs, watches a thread that sleeps 200
// times, and checks the counters and the ring buffer saw it.
func TestWatchSleeper(t *testing.T) {
	for _, force := range []bool{false, true} {
		p := loadOrSkip(t, Options{Events: true, ForceRawTP: force, Log: zerolog.Nop()})
		t.Logf("mode %s", p.Mode())
		if force && p.Mode() != ModeRawTP {
			t.Fatalf("ForceRawTP gave mode %s", p.Mode())
		}
		tidc := make(chan int)
		done := make(chan struct{})
		start := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tidc <- unix.Gettid()
			<-start
			for i := 0; i < 200; i++ {
				unix.Nanosleep(&unix.Timespec{Nsec: 500_000}, nil)
			}
			close(done)
		}()
		tid := uint32(<-tidc)
		if err := p.Watch(tid); err != nil {
			t.Fatal(err)
		}
		close(start)
		<-done
		var s bpf.SchedThreadStats
		if err := p.Stats(tid, &s); err != nil {
			t.Fatal(err)
		}
		// A sleep whose timer fires before the thread gets to sleep
		// makes no switch. (Whether it is preempted depends on the
		// machine's load; agent/monitor checks that against the kernel.)
		if s.Switches < 190 || s.Wakeups < 190 {
			t.Fatalf("switches %d wakeups %d, want ~200 each", s.Switches, s.Wakeups)
		}
		var n int
		for _, h := range s.WakeHist {
			n += int(h)
		}
		if n < 190 {
			t.Errorf("wake histogram holds %d samples, want ~200", n)
		}
		var ev bpf.SchedSwitchEvent
		var rec ringbuf.Record
		if err := p.ReadEvent(&rec, &ev); err != nil {
			t.Fatalf("ReadEvent: %v", err)
		}
		// A sleeper's off-CPU intervals are ~500 µs sleeps, not waits.
		if ev.Tid != tid || ev.InNs == 0 || ev.Preempted != 0 {
			t.Fatalf("event %+v not a sleep of tid %d", ev, tid)
		}
		if err := p.Unwatch(tid); err != nil {
			t.Fatal(err)
		}
		if err := p.Stats(tid, &s); !errors.Is(err, ErrNotWatched) {
			t.Fatalf("Stats after Unwatch: %v", err)
		}
		p.Close()
	}
}

// AllStats returns every watched thread once, across several batches, and
// the same counters as Stats.
func TestAllStats(t *testing.T) {
	p := loadOrSkip(t, Options{Log: zerolog.Nop()})
	want := map[uint32]bool{}
	for i := range 3*statsBatch + 5 {
		tid := uint32(4_000_000 + i) // no such threads: counters stay zero
		if err := p.Watch(tid); err != nil {
			t.Fatal(err)
		}
		want[tid] = true
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := uint32(unix.Gettid())
	if err := p.Watch(self); err != nil {
		t.Fatal(err)
	}
	want[self] = true
	time.Sleep(10 * time.Millisecond) // switches out and in
	got := map[uint32]int{}
	var mine bpf.SchedThreadStats
	if err := p.AllStats(func(tid uint32, st *bpf.SchedThreadStats) {
		got[tid]++
		if tid == self {
			mine = *st
		}
	}); err != nil {
		t.Fatal(err)
	}
	for tid := range want {
		if got[tid] != 1 {
			t.Errorf("tid %d returned %d times", tid, got[tid])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d threads returned, %d watched", len(got), len(want))
	}
	var one bpf.SchedThreadStats
	if err := p.Stats(self, &one); err != nil {
		t.Fatal(err)
	}
	if mine.Switches == 0 || one.Switches < mine.Switches {
		t.Errorf("this thread: %d switch-ins in the batch, %d read after", mine.Switches, one.Switches)
	}
}

// Load uses tp_btf wherever the kernel loads and attaches the tp_btf set,
// whatever the feature probe (an fentry program) says.
func TestLoadPrefersTPBTF(t *testing.T) {
	p := loadOrSkip(t, Options{Log: zerolog.Nop()})
	mode := p.Mode()
	p.Close()
	spec, err := bpf.LoadSched()
	if err != nil {
		t.Fatal(err)
	}
	direct := &Probe{wake: newWakeWatch(), closed: make(chan struct{})}
	berr := direct.loadBTF(spec, Options{Log: zerolog.Nop()})
	direct.Close()
	t.Logf("Load chose %s; tp_btf alone: %v", mode, berr)
	if berr == nil && mode != ModeTPBTF {
		t.Errorf("the kernel runs the tp_btf programs, Load chose %s", mode)
	}
}
