//go:build linux

package monitor

import (
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// eventsProbe hands out a fixed list of switch events, then reports the
// ring buffer closed.
type eventsProbe struct{ evs []bpf.SchedSwitchEvent }

func (p *eventsProbe) Watch(uint32) error                                { return nil }
func (p *eventsProbe) Unwatch(uint32) error                              { return nil }
func (p *eventsProbe) Stats(uint32, *bpf.SchedThreadStats) error         { return bpfload.ErrNotWatched }
func (p *eventsProbe) Corunners() (map[uint32][]bpfload.Corunner, error) { return nil, nil }
func (p *eventsProbe) Drops() (uint64, error)                            { return 0, nil }
func (p *eventsProbe) Mode() string                                      { return "test" }
func (p *eventsProbe) Attach() error                                     { return nil }
func (p *eventsProbe) Detach() error                                     { return nil }
func (p *eventsProbe) StopEvents() error                                 { return nil }

func (p *eventsProbe) ReadEvent(_ *ringbuf.Record, ev *bpf.SchedSwitchEvent) error {
	if len(p.evs) == 0 {
		return ringbuf.ErrClosed
	}
	*ev, p.evs = p.evs[0], p.evs[1:]
	return nil
}

type readerSeen struct {
	tid    int
	policy uint32
	procs  int
}

func readWith(t *testing.T, prio int, evs []bpf.SchedSwitchEvent) []readerSeen {
	t.Helper()
	var seen []readerSeen
	m := New(&eventsProbe{evs: evs}, Options{Log: zerolog.Nop(), ReaderPriority: prio, OnEvent: func(*bpf.SchedSwitchEvent) {
		s := readerSeen{tid: unix.Gettid(), procs: runtime.GOMAXPROCS(0)}
		if a, err := unix.SchedGetAttr(0, 0); err == nil {
			s.policy = a.Policy
		}
		seen = append(seen, s)
	}})
	done := make(chan struct{})
	go func() { defer close(done); m.readEvents() }()
	<-done
	return seen
}

// With OnEvent set the reader is one real-time thread (as root), with one
// more P while it runs; the events reach OnEvent before the timeline.
func TestRealtimeReader(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	seen := readWith(t, 0, []bpf.SchedSwitchEvent{{Tid: 1, InNs: 1}, {Tid: 1, InNs: 2}, {Tid: 1, InNs: 3}})
	if len(seen) != 3 {
		t.Fatalf("%d events seen", len(seen))
	}
	for _, s := range seen {
		if s.tid != seen[0].tid {
			t.Fatalf("events on threads %d and %d: not one thread", seen[0].tid, s.tid)
		}
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Fatalf("GOMAXPROCS %d after the reader stopped, want %d back", got, procs)
	}
	if os.Geteuid() != 0 {
		t.Skip("real-time priority needs root")
	}
	if seen[0].policy != unix.SCHED_FIFO || seen[0].procs != procs+1 {
		t.Fatalf("reader policy %d with %d Ps, want SCHED_FIFO with %d", seen[0].policy, seen[0].procs, procs+1)
	}
	// A negative priority keeps it ordinary.
	if s := readWith(t, -1, []bpf.SchedSwitchEvent{{Tid: 1, InNs: 1}}); s[0].policy == unix.SCHED_FIFO || s[0].procs != procs {
		t.Fatalf("ordinary reader: policy %d, %d Ps", s[0].policy, s[0].procs)
	}
}

// The reader goes to the CPU where it has found watched threads least,
// at most once per minMoveGap, and forgets slowly.
func TestPlacementMovesSlowly(t *testing.T) {
	var p placement
	for c := range 3 {
		p.allowed.Set(c)
	}
	now := int64(1)
	if to, move := p.move(2, now); !move || to != 0 {
		t.Fatalf("after CPU 2: move %v to %d, want to CPU 0", move, to)
	}
	for i := range 3 {
		if to, move := p.move(0, now+int64(i)); move {
			t.Fatalf("moved again to %d within minMoveGap", to)
		}
	}
	if to, move := p.move(0, now+minMoveGap); !move || to != 1 {
		t.Fatalf("CPU 0 busiest: move %v to %d, want to CPU 1", move, to)
	}
	// Counts 0:4 1:0 2:1: a hit on CPU 1 ties it with CPU 2 (stay), a
	// second makes it the busier (move).
	if _, move := p.move(1, now+3*minMoveGap); move {
		t.Fatal("moved off CPU 1, the quietest")
	}
	if to, move := p.move(1, now+4*minMoveGap); !move || to != 2 {
		t.Fatalf("CPU 1 busier than CPU 2: move %v to %d, want to CPU 2", move, to)
	}
}
