package mitigate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/agent/runstate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// tidSched plays a kernel that keeps each thread's slice; with a
// journal, each set also notes whether the thread was in it then.
type tidSched struct {
	mu        sync.Mutex
	rt        map[int]uint64
	sets      int
	journal   string
	journaled map[int]bool // at its latest set
}

func newTIDSched() *tidSched { return &tidSched{rt: map[int]uint64{}, journaled: map[int]bool{}} }

func (s *tidSched) Get(tid int) (*unix.SchedAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &unix.SchedAttr{Size: unix.SizeofSchedAttr, Runtime: s.rt[tid]}, nil
}

func (s *tidSched) Set(tid int, a *unix.SchedAttr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rt[tid] = a.Runtime
	s.sets++
	if s.journal != "" {
		s.journaled[tid] = slices.ContainsFunc(journalOf(s.journal).Threads, func(r runstate.Slice) bool { return r.TID == tid })
	}
	return nil
}

func (s *tidSched) runtime(tid int) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rt[tid]
}

func journalOf(path string) runstate.Record {
	var r runstate.Record
	b, _ := os.ReadFile(path)
	_ = json.Unmarshal(b, &r)
	return r
}

// gated is a mitigator gated on a tracker, on a clock the test moves.
type gated struct {
	*Mitigator
	cont  *contention.Tracker
	sched *tidSched
	now   uint64
}

func newGated(t *testing.T, o Options) *gated {
	t.Helper()
	g := &gated{cont: contention.NewTracker(42), sched: newTIDSched(), now: 10 * contention.For}
	if o.Sched != nil {
		g.sched = o.Sched.(*tidSched)
	}
	o.Slice, o.Sched, o.Contention, o.Log = slice, g.sched, g.cont, zerolog.Nop()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	m.now = func() uint64 { return g.now }
	if o.StateDir == "" {
		madeUp(m) // a journal needs real threads
	}
	g.Mitigator = m
	return g
}

// turn feeds the tracker a switch-in of tid at the test's now, after
// 4 ms off its CPU to a task of process other (its own process is own).
func (g *gated) turn(tid int, own, other uint32) {
	g.cont.Learn(&bpf.SchedSwitchEvent{InNs: g.now, OffNs: 4_000_000, RunNs: 3_000_000, Tid: uint32(tid),
		Tgid: own, Preempted: 1, OtherTgid: other})
}

func (g *gated) at(now uint64) { g.now = now; g.gate(now) }

// madeUp plays the start times of the made-up threads a simulated
// kernel's tests watch: each keeps one start time.
func madeUp(m *Mitigator) {
	m.startOf = func(int) (uint64, error) { return 1, nil }
}

func pidTarget(name string, tids ...int) targets.Target {
	tg := targets.Target{Kind: targets.KindPID, Name: name}
	for _, tid := range tids {
		tg.Threads = append(tg.Threads, targets.Thread{TID: tid, VCPU: -1})
	}
	return tg
}

// Gated, a watched thread has the slice only while another process's
// task took its CPU within contention.For, and its own back (a custom
// one here) once it has been free that long; the program's own threads
// are no contention; a thread flips at most once per contention.For;
// Stop puts back a slice that is set.
func TestGate(t *testing.T) {
	const own, other, a, b = 100, 77, 101, 102
	const custom = 3_000_000
	g := newGated(t, Options{})
	g.sched.rt[a] = custom
	g.Apply(targets.Event{Kind: targets.Added, Target: pidTarget("p", a, b)})
	start := g.now
	g.at(start)
	if g.Slice(a) != 0 || g.Slice(b) != 0 || g.sched.runtime(a) != custom || g.sched.runtime(b) != 0 {
		t.Fatalf("watched, not contended: slices %v %v, kernel %d %d", g.Slice(a), g.Slice(b), g.sched.runtime(a), g.sched.runtime(b))
	}

	g.now = start + 1_000_000
	g.turn(a, own, other) // a co-runner's turn
	g.turn(b, own, own)   // the program's own thread
	set := g.now
	g.at(set)
	if g.Slice(a) != slice || g.sched.runtime(a) != uint64(slice) {
		t.Fatalf("contended: slice %v, kernel %d; want %v", g.Slice(a), g.sched.runtime(a), slice)
	}
	if g.Slice(b) != 0 || g.sched.runtime(b) != 0 {
		t.Fatalf("preempted by its own process only: slice %v, kernel %d", g.Slice(b), g.sched.runtime(b))
	}

	// The co-runner's turn began at set - 4 ms: free from then on
	// plus contention.For, and restored once the slice has also been
	// set that long.
	shared := set - 4_000_000
	g.at(shared + contention.For - 1)
	if g.Slice(a) != slice {
		t.Fatal("restored before it was free for contention.For")
	}
	g.at(shared + contention.For)
	if g.Slice(a) != slice {
		t.Fatal("restored within contention.For of being set")
	}
	freed := set + contention.For
	g.at(freed)
	if g.Slice(a) != 0 || g.sched.runtime(a) != custom {
		t.Fatalf("free for contention.For: slice %v, kernel %d; want 0 and its own %d", g.Slice(a), g.sched.runtime(a), custom)
	}

	// Contended again at once: not before contention.For after the flip.
	g.now = freed + 1_000_000
	g.turn(a, own, other)
	g.at(g.now)
	if g.Slice(a) != 0 {
		t.Fatal("flipped twice within contention.For")
	}
	g.now = freed + contention.For - 1_000_000
	g.turn(a, own, other) // still contended
	g.at(freed + contention.For)
	if g.Slice(a) != slice || g.sched.runtime(a) != uint64(slice) {
		t.Fatalf("contended after the pause: slice %v, kernel %d", g.Slice(a), g.sched.runtime(a))
	}

	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	if g.Slice(a) != 0 || g.sched.runtime(a) != custom || g.sched.runtime(b) != 0 {
		t.Fatalf("after Stop: slice %v, kernel %d %d; want its own %d and the default", g.Slice(a), g.sched.runtime(a), g.sched.runtime(b), custom)
	}
	if _, ok := g.cont.Get(a); ok {
		t.Error("Stop left the thread in the tracker")
	}
}

// A vCPU's own process is its VM: another vCPU on its CPU contends. A
// domain's helper has the slice while one of its threads has.
func TestGateVCPUAndHelper(t *testing.T) {
	const vm, v0, v1, emulator = 300, 301, 302, 300
	g := newGated(t, Options{})
	tg := targets.Target{Kind: targets.KindDomain, Name: "d", Helpers: []int{emulator},
		Threads: []targets.Thread{{TID: v0, VCPU: 0}, {TID: v1, VCPU: 1}}}
	g.Apply(targets.Event{Kind: targets.Added, Target: tg})
	g.at(g.now)
	if g.Slice(emulator) != 0 {
		t.Fatal("helper with the slice beside no contention")
	}
	g.turn(v0, vm, vm)
	g.at(g.now)
	if g.Slice(v0) != slice || g.Slice(emulator) != slice || g.Slice(v1) != 0 {
		t.Fatalf("vCPU 0 beside vCPU 1: slices %v (helper %v, vCPU 1 %v)", g.Slice(v0), g.Slice(emulator), g.Slice(v1))
	}
	g.Apply(targets.Event{Kind: targets.Removed, Target: tg})
	if g.sched.runtime(v0) != 0 || g.sched.runtime(emulator) != 0 {
		t.Fatal("slices kept after the target went")
	}
}

// A thread that already has the slice when it is first seen (made by a
// thread that had it) is the mitigator's: reported, and put back once
// free.
func TestGateInherited(t *testing.T) {
	g := newGated(t, Options{})
	g.sched.rt[401] = uint64(slice)
	g.Apply(targets.Event{Kind: targets.Added, Target: pidTarget("p", 401)})
	if g.Slice(401) != slice {
		t.Fatal("an inherited slice not reported")
	}
	g.at(g.now + contention.For)
	if g.Slice(401) != 0 || g.sched.runtime(401) != 0 {
		t.Fatalf("inherited, free: slice %v kernel %d; want the default", g.Slice(401), g.sched.runtime(401))
	}
}

// With a state directory a flip is journaled before the slice is set,
// and the record goes when the slice is put back; the thread's process
// is locked while it is watched.
func TestGateJournaled(t *testing.T) {
	dir := t.TempDir()
	s := newTIDSched()
	s.journal = filepath.Join(dir, "slices-"+strconv.Itoa(os.Getpid())+".json")
	g := newGated(t, Options{StateDir: dir, Sched: s})
	tid := schedtest.Parked(t)
	s.rt[tid] = 0
	g.Apply(targets.Event{Kind: targets.Added, Target: pidTarget("p", tid)})
	if n := len(journalOf(s.journal).Threads); n != 0 {
		t.Fatalf("%d threads journaled before any is contended", n)
	}
	g.turn(tid, uint32(os.Getpid()), 77)
	g.at(g.now)
	if g.Slice(tid) != slice || !s.journaled[tid] {
		t.Fatalf("contended: slice %v, journaled when set %v", g.Slice(tid), s.journaled[tid])
	}
	if r := journalOf(s.journal); len(r.Threads) != 1 || r.Threads[0].TID != tid || r.Threads[0].TGID != os.Getpid() {
		t.Fatalf("journal %+v, want thread %d of process %d", r, tid, os.Getpid())
	}
	name, err := runstate.ProcessLockName(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, name+".lock")); err != nil {
		t.Errorf("the process's lock: %v", err)
	}
	g.at(g.now + contention.For)
	if g.Slice(tid) != 0 || len(journalOf(s.journal).Threads) != 0 {
		t.Fatalf("free: slice %v, journal %+v", g.Slice(tid), journalOf(s.journal))
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Run sets the slice of a thread that turns shared without waiting for
// its period, and stops with its context.
func TestGateRun(t *testing.T) {
	g := newGated(t, Options{})
	g.Apply(targets.Event{Kind: targets.Added, Target: pidTarget("p", 501)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	g.turn(501, 1, 77)
	eventually(t, "the slice of a contended thread", func() bool { return g.Slice(501) == slice })
	cancel()
	<-done
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	if g.sched.runtime(501) != 0 {
		t.Error("Stop left the slice")
	}
}
