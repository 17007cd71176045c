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

func TestPlacementAvoids(t *testing.T) {
	var p placement
	for i := range 4 {
		p.allowed.Set(i)
	}
	p.avoid.Set(1)
	p.avoid.Set(3)
	if set := p.without(); set.Count() != 2 || !set.IsSet(0) || !set.IsSet(2) {
		t.Fatalf("without: %v", set)
	}
}

// The reader leaves each CPU where it preempted a watched thread while
// another is left, and then stays put instead of circling.
func TestPlacementStopsMoving(t *testing.T) {
	var p placement
	p.allowed.Set(0)
	p.allowed.Set(1)
	if set, move := p.move(1); !move || set.Count() != 1 || !set.IsSet(0) {
		t.Fatalf("after CPU 1: move %v to %v, want to CPU 0", move, set)
	}
	for _, cpu := range []int{0, 1, 0} {
		if set, move := p.move(cpu); move {
			t.Fatalf("after CPU %d with both avoided: moved to %v", cpu, set)
		}
	}
}
