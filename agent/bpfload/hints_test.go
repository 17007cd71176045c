//go:build linux

package bpfload

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// TestHintArrayWrites: the programs write the live block of a registered
// thread into its target's array at each switch they see, in or out
// (sleeps, and a co-runner pinned to its CPU for preemptions); a reader
// mapping the array through a read-only descriptor sees blocks that match
// the thread's BPF stats, never a torn one it accepts, and cannot map it
// writable.
func TestHintArrayWrites(t *testing.T) { inEachMode(t, hintArrayWrites) }

// inEachMode runs a live-array test with each program set the host can
// load (tp_btf where it can, and raw tracepoints), as the hint publisher
// loads them.
func inEachMode(t *testing.T, test func(*testing.T, *Probe)) {
	if runtime.GOARCH != "amd64" {
		t.Skip("live arrays are x86-64 only")
	}
	for _, force := range []bool{false, true} {
		p := loadOrSkip(t, Options{Events: true, WakeEveryEvent: true, ForceRawTP: force, Log: zerolog.Nop()})
		t.Run(p.Mode(), func(t *testing.T) { test(t, p) })
	}
}

func hintArrayWrites(t *testing.T, p *Probe) {
	const slot = 3
	a, err := p.NewHintArray(8)
	if err != nil {
		t.Fatalf("NewHintArray: %v", err)
	}
	defer p.RemoveHintArray(a)
	other, err := p.NewHintArray(8)
	if err != nil {
		t.Fatalf("second NewHintArray: %v", err)
	}
	defer p.RemoveHintArray(other)
	if other.ID == a.ID {
		t.Fatalf("two arrays share id %d", a.ID)
	}

	fd, err := a.FD()
	if err != nil {
		t.Fatalf("FD: %v", err)
	}
	defer unix.Close(fd)
	size := hintpage.ArraySize(a.Slots)
	if _, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		t.Fatalf("the frozen array mapped writable")
	}
	if _, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_PRIVATE); err == nil {
		t.Fatalf("the array mapped private (copy-on-write)")
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mapping the array read-only: %v", err)
	}
	defer unix.Munmap(mem)
	arr, err := hintpage.ParseLiveArray(mem, a.Slots)
	if err != nil {
		t.Fatal(err)
	}

	tidc := make(chan int)
	start, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { // the watched thread
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tidc <- unix.Gettid()
		<-start
		var set unix.CPUSet
		set.Set(0)
		_ = unix.SchedSetaffinity(0, &set)
		// At least 300 ms, 5 preemptions and the 50 switches judged
		// below (at most 3 s: on a loaded machine 300 ms can hold
		// fewer).
		begin := time.Now()
		var st bpf.SchedThreadStats
		for i := 0; ; i++ {
			if i%50 == 0 {
				if d := time.Since(begin); d > 3*time.Second ||
					d > 300*time.Millisecond && p.Stats(uint32(unix.Gettid()), &st) == nil && st.Preemptions >= 5 && st.Switches >= 50 {
					break
				}
				unix.Nanosleep(&unix.Timespec{Nsec: 200_000}, nil)
			}
			for j := 0; j < 200_000; j++ { // spin a little: the co-runner preempts it
				_ = j * j
			}
		}
		close(done)
		<-stop
	}()
	tid := uint32(<-tidc)
	if err := p.Watch(tid); err != nil {
		t.Fatal(err)
	}
	if err := p.SetHintSlot(tid, a.ID, slot); err != nil {
		t.Fatal(err)
	}
	st0 := stableStats(t, p, tid) // the thread waits for start: no switch
	var wg sync.WaitGroup
	quit := make(chan struct{})
	wg.Add(1)
	go func() { // a co-runner on CPU 0
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set unix.CPUSet
		set.Set(0)
		_ = unix.SchedSetaffinity(0, &set)
		for {
			select {
			case <-quit:
				return
			default:
			}
			for j := 0; j < 10000; j++ {
				_ = j * j
			}
		}
	}()
	var reads, torn, ok atomic.Int64
	var bad atomic.Value
	wg.Add(1)
	go func() { // a concurrent reader
		defer wg.Done()
		var s hintpage.Slot
		var lastIn uint64
		for {
			select {
			case <-quit:
				return
			default:
			}
			s = hintpage.Slot{PublishNs: 1, Contention: hintpage.ContShared, SliceNs: 1e6}
			err := arr.ReadLive(slot, tid, &s)
			reads.Add(1)
			switch err {
			case nil:
				ok.Add(1)
				if s.SwitchInNs < lastIn || s.LiveFlags != hintpage.LiveKernel ||
					(s.State == hintpage.StateRunning) != (s.SwitchOutNs < s.SwitchInNs) {
					bad.Store(s)
				}
				lastIn = s.SwitchInNs
			case hintpage.ErrTorn:
				torn.Add(1)
			case hintpage.ErrNoSlot:
			default:
				bad.Store(err)
			}
		}
	}()
	close(start)
	<-done
	time.Sleep(20 * time.Millisecond) // the thread is asleep on stop now
	close(quit)
	wg.Wait()

	// The stopped thread still wakes now and then (the Go runtime
	// signals it), so the counters and the block are compared only when
	// no switch came between reading them.
	var st, after bpf.SchedThreadStats
	var s hintpage.Slot
	for try := 0; ; try++ {
		if err := p.Stats(tid, &st); err != nil {
			t.Fatal(err)
		}
		s = hintpage.Slot{PublishNs: 1}
		if err := arr.ReadLive(slot, tid, &s); err != nil {
			t.Fatalf("final read: %v", err)
		}
		if err := p.Stats(tid, &after); err != nil {
			t.Fatal(err)
		}
		if sameCounts(&after, &st) || try == 20 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	writes, seen := st.HintWrites-st0.HintWrites, events(&st)-events(&st0)
	t.Logf("switch-ins %d switch-outs %d preemptions %d, blocks written %d; reader: %d reads, %d ok, %d torn",
		st.Switches, st.SwitchOuts, st.Preemptions, writes, reads.Load(), ok.Load(), torn.Load())
	if v := bad.Load(); v != nil {
		t.Errorf("reader saw a bad block: %+v", v)
	}
	if s.SwitchInNs != st.SwitchInNs || s.SwitchOutNs != st.SwitchOutNs || s.CPU != uint16(st.Cpu) {
		t.Errorf("block in %d out %d cpu %d, stats in %d out %d cpu %d", s.SwitchInNs, s.SwitchOutNs, s.CPU,
			st.SwitchInNs, st.SwitchOutNs, st.Cpu)
	}
	if s.State != hintpage.StateSleeping {
		t.Errorf("state %d, want sleeping", s.State)
	}
	if st.Switches < 50 || st.Preemptions == 0 {
		t.Errorf("too few switches (%d) or no preemption (%d) to judge", st.Switches, st.Preemptions)
	}
	// One write per switch the programs saw since registration, in or
	// out; a switch the programs were inside when a count was read may
	// fall on either side of it.
	if writes+1 < seen || writes > seen+1 {
		t.Errorf("%d blocks written for %d switches seen (in and out) since registration", writes, seen)
	}
	if ok.Load() == 0 {
		t.Errorf("the reader never read a whole block")
	}
	// The other target's array was never written.
	var o hintpage.Slot
	ofd, err := other.FD()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ofd)
	omem, err := unix.Mmap(ofd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(omem)
	oa, _ := hintpage.ParseLiveArray(omem, other.Slots)
	if err := oa.ReadLive(slot, tid, &o); err != hintpage.ErrNoSlot {
		t.Errorf("the other target's array: %v %+v", err, o)
	}
	// Unregistered: no more writes.
	if err := p.ClearHintSlot(tid); err != nil {
		t.Fatal(err)
	}
	close(stop)
	_ = p.Unwatch(tid)
}

// TestHintRegistrationChanges: the programs keep a copy of each thread's
// registration and take every change from the thread's next switch on: a
// thread moved to another array and slot is written there (and no more
// in the first), a cleared one nowhere, and registered again it is
// written again; every write is counted for it.
func TestHintRegistrationChanges(t *testing.T) { inEachMode(t, hintRegistrationChanges) }

func hintRegistrationChanges(t *testing.T, p *Probe) {
	var arrs [2]*HintArray
	var live [2]*hintpage.LiveArray
	for i := range arrs {
		a, err := p.NewHintArray(4)
		if err != nil {
			t.Fatalf("NewHintArray: %v", err)
		}
		defer p.RemoveHintArray(a)
		arrs[i], live[i] = a, mapLive(t, a)
	}
	sl := newSleeper(t)
	defer sl.stop()
	if err := p.Watch(sl.tid); err != nil {
		t.Fatal(err)
	}
	defer p.Unwatch(sl.tid)

	// block reads the thread's block in array i, slot; ok false when the
	// block is not the thread's.
	block := func(i, slot int) (hintpage.Slot, bool) {
		s := hintpage.Slot{PublishNs: 1}
		err := live[i].ReadLive(slot, sl.tid, &s)
		return s, err == nil
	}
	stats := func() bpf.SchedThreadStats { return stableStats(t, p, sl.tid) }
	// written: the block is the thread's latest switch, read between
	// two reads of its counters that agree (it may still be on its way
	// to its wait).
	written := func(what string, i, slot int) {
		t.Helper()
		var (
			st, st2 bpf.SchedThreadStats
			s       hintpage.Slot
			ok      bool
		)
		for range 100 {
			st = stats()
			s, ok = block(i, slot)
			if st2 = stats(); st2.Switches == st.Switches && st2.SwitchOutNs == st.SwitchOutNs {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if !ok || s.SwitchInNs != st.SwitchInNs || s.SwitchOutNs != st.SwitchOutNs {
			t.Errorf("%s: block %d/%d %+v (ok %v), counters in %d out %d", what, i, slot, s, ok, st.SwitchInNs, st.SwitchOutNs)
		}
	}
	// stale: the block was not written since the switch-out at out.
	stale := func(what string, i, slot int, out uint64) {
		t.Helper()
		if s, ok := block(i, slot); ok && s.SwitchOutNs > out {
			t.Errorf("%s: block %d/%d written after the change (out %d > %d)", what, i, slot, s.SwitchOutNs, out)
		}
	}

	if err := p.SetHintSlot(sl.tid, arrs[0].ID, 1); err != nil {
		t.Fatal(err)
	}
	first := stats()
	sl.sleep(20)
	written("registered", 0, 1)
	if st := stats(); events(&st)-events(&first) < 20 || st.HintWrites == 0 {
		t.Errorf("registered: %d blocks written for 20 sleeps (%d switches seen)", st.HintWrites, events(&st)-events(&first))
	}

	if err := p.SetHintSlot(sl.tid, arrs[1].ID, 2); err != nil {
		t.Fatal(err)
	}
	moved := stats().SwitchOutNs
	sl.sleep(20)
	written("moved", 1, 2)
	stale("moved, the old array", 0, 1, moved)

	if err := p.ClearHintSlot(sl.tid); err != nil {
		t.Fatal(err)
	}
	cleared := stats()
	sl.sleep(20)
	stale("cleared", 1, 2, cleared.SwitchOutNs)
	if st := stats(); st.HintWrites != cleared.HintWrites || events(&st) < events(&cleared)+20 {
		t.Errorf("cleared: %d writes after %d more switches", st.HintWrites-cleared.HintWrites, events(&st)-events(&cleared))
	}

	if err := p.SetHintSlot(sl.tid, arrs[0].ID, 3); err != nil {
		t.Fatal(err)
	}
	again := stats()
	sl.sleep(20)
	written("registered again", 0, 3)
	st := stats()
	// One write per switch the programs saw while registered, in or out
	// (however many a busy machine adds); each of the four counts taken
	// at a change or at the end may miss or hold one switch the programs
	// were inside.
	seen := (events(&cleared) - events(&first)) + (events(&st) - events(&again))
	if got := st.HintWrites; got+4 < seen || got > seen+4 {
		t.Errorf("%d live blocks written for %d switches seen (in and out) in 3 rounds of 20 sleeps", got, seen)
	}
	if reg, err := p.HintSlot(sl.tid); err != nil || reg.Target != arrs[0].ID || reg.Slot != 3 || reg.Writes != st.HintWrites {
		t.Errorf("HintSlot: %+v, %v; counters: %d writes", reg, err, st.HintWrites)
	}
}

// events is how many switches of the thread the programs saw, in and
// out: each writes its live block while it is registered. Not twice the
// switch-ins: on a busy machine the tracepoint shows some switch-outs with
// no switch-in between (the kernel's own trace of sched_switch too).
func events(st *bpf.SchedThreadStats) uint64 { return st.Switches + st.SwitchOuts }

// sameCounts: a and b, read one after the other, hold the same switches
// and writes (no switch came between).
func sameCounts(a, b *bpf.SchedThreadStats) bool {
	return a.Switches == b.Switches && a.SwitchOuts == b.SwitchOuts && a.HintWrites == b.HintWrites
}

// stableStats reads tid's counters twice until no switch came between.
func stableStats(t *testing.T, p *Probe, tid uint32) bpf.SchedThreadStats {
	t.Helper()
	var a, b bpf.SchedThreadStats
	for range 100 {
		if err := p.Stats(tid, &a); err != nil {
			t.Fatal(err)
		}
		if err := p.Stats(tid, &b); err != nil {
			t.Fatal(err)
		}
		if sameCounts(&a, &b) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return b
}

// mapLive maps a live array read-only, as a target's process does.
func mapLive(t *testing.T, a *HintArray) *hintpage.LiveArray {
	t.Helper()
	fd, err := a.FD()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mem, err := unix.Mmap(fd, 0, hintpage.ArraySize(a.Slots), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mapping the array: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	arr, err := hintpage.ParseLiveArray(mem, a.Slots)
	if err != nil {
		t.Fatal(err)
	}
	return arr
}

// sleeper is a thread that sleeps 100 µs n times when asked (each sleep
// a switch-out and a switch-in), and otherwise waits asleep.
type sleeper struct {
	tid  uint32
	req  chan int
	done chan struct{}
}

func newSleeper(t *testing.T) *sleeper {
	s := &sleeper{req: make(chan int), done: make(chan struct{})}
	tidc := make(chan uint32)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tidc <- uint32(unix.Gettid())
		for n := range s.req {
			for range n {
				unix.Nanosleep(&unix.Timespec{Nsec: 100_000}, nil)
			}
			s.done <- struct{}{}
		}
	}()
	s.tid = <-tidc
	return s
}

func (s *sleeper) sleep(n int) { s.req <- n; <-s.done }
func (s *sleeper) stop()       { close(s.req) }
