package contention

import (
	"testing"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

func preempted(in, off, run uint64, other, own uint32) Interval {
	return Interval{In: in, Off: off, Run: run, Preempted: true, Other: other, Own: own}
}

// Preemptions that are not a co-runner's turn: by the agent's own
// process, shorter than 100 µs, or to the idle task (held back by the
// quota); a sleep is nothing either.
func TestLearnWhoTookTheCPU(t *testing.T) {
	const self, own = 42, 1
	var th Thread
	if c := th.Learn(preempted(10_000_000, 30_000, 4_000_000, self, own), self); c != None {
		t.Fatalf("the agent's preemption: %d", c)
	}
	if c := th.Learn(preempted(20_000_000, 50_000, 4_000_000, 77, own), self); c != None {
		t.Fatalf("a short preemption: %d", c)
	}
	if c := th.Learn(Interval{In: 21_000_000, Off: 900_000, Run: 10_000, Own: own}, self); c != None || th.LastShared != 0 {
		t.Fatalf("a sleep: %d, shared %d", c, th.LastShared)
	}
	if c := th.Learn(preempted(30_000_000, 5_000_000, 4_000_000, 0, own), self); c != Throttled || th.LastShared != 0 || th.LastThrottled != 25_000_000 {
		t.Fatalf("preempted to idle: %d shared %d throttled %d", c, th.LastShared, th.LastThrottled)
	}
	if c := th.Learn(preempted(40_000_000, 4_000_000, 3_000_000, 77, own), self); c != Shared || th.LastShared != 36_000_000 {
		t.Fatalf("a co-runner's turn: %d shared %d", c, th.LastShared)
	}
	if !th.Shared(36_000_000+For-1) || th.Shared(36_000_000+For) {
		t.Fatal("shared for other than For after the co-runner's turn")
	}
}

// Under a quota alone, the records of a 6.18 kernel's throttle and of the
// program's own threads: neither is a co-runner's turn. The throttle is
// two switch-outs: one counted as a throttle, back in for a few µs, then
// held for the rest of the period with whatever task runs next.
func TestLearnQuotaAlone(t *testing.T) {
	const self, own, ksoftirqd = 42, 1000, 14
	var th Thread
	th.Learn(Interval{In: 10_000_000, Off: 2_000, Run: 100_000, Preempted: true, Throttled: true, Other: own, Own: own}, self)
	th.Learn(preempted(10_000_000+3_000+8_800_000, 8_800_000, 3_000, ksoftirqd, own), self)
	if th.LastShared != 0 || th.LastThrottled != 10_003_000 {
		t.Fatalf("a throttle's second switch-out: shared %d throttled %d", th.LastShared, th.LastThrottled)
	}
	if c := th.Learn(preempted(30_000_000, 150_000, 120_000, own, own), self); c != None || th.LastShared != 0 {
		t.Fatalf("the program's own thread: %d shared %d", c, th.LastShared)
	}
	if !th.Throttled(30_000_000) || th.Shared(30_000_000) || th.Free(30_000_000) {
		t.Fatal("want throttled, not shared nor free")
	}
	// A co-runner's turn after a throttled run of its own is one.
	th.Learn(preempted(40_000_000, 150_000, 3_000, 77, own), self)
	if th.LastShared != 40_000_000-150_000 {
		t.Fatalf("a co-runner after a run: shared %d", th.LastShared)
	}
	// A vCPU's own process is its VM's other vCPUs.
	v := Thread{VCPU: true}
	if c := v.Learn(preempted(30_000_000, 2_000_000, 3_000_000, own, own), self); c != Shared || v.LastShared != 28_000_000 {
		t.Fatalf("another vCPU of the VM: %d shared %d", c, v.LastShared)
	}
}

// Free: watched For, and neither shared nor throttled meanwhile.
func TestFree(t *testing.T) {
	th := Thread{Since: 1_000}
	if th.Free(1_000 + For - 1) {
		t.Error("free before it was watched For")
	}
	if !th.Free(1_000 + For) {
		t.Error("not free after For alone")
	}
	th.LastShared = 2_000
	if th.Free(1_000+For) || !th.Free(2_000+For) {
		t.Error("a co-runner's turn does not hold off free for For")
	}
}

// The tracker learns only for the threads added (counting their users),
// and says when a thread turns shared, once per turn.
func TestTracker(t *testing.T) {
	const self = 42
	c := NewTracker(self)
	turn := func(tid uint32, in uint64, other uint32) Class {
		return c.Learn(&bpf.SchedSwitchEvent{InNs: in, OffNs: 4_000_000, RunNs: 3_000_000, Tid: tid, Tgid: 7, Preempted: 1, OtherTgid: other})
	}
	if turn(8, 10_000_000, 77) != None || c.Shared(8, 10_000_000) {
		t.Fatal("a thread nobody added learnt")
	}
	c.Add(8, false, 1)
	c.Add(8, true, 2) // a second user; the first decided
	if turn(8, 10_000_000, 7) != None {
		t.Fatal("the program's own thread counted")
	}
	select {
	case <-c.SharedNow():
		t.Fatal("SharedNow without a co-runner")
	default:
	}
	if turn(8, 20_000_000, 77) != Shared || !c.Shared(8, 20_000_000) {
		t.Fatal("a co-runner's turn not shared")
	}
	turn(8, 30_000_000, 77)
	select {
	case <-c.SharedNow():
	default:
		t.Fatal("no SharedNow when the thread turned shared")
	}
	select {
	case <-c.SharedNow():
		t.Fatal("SharedNow again for a thread already shared")
	default:
	}
	if c.Shared(8, 26_000_000+For) {
		t.Fatal("still shared For after the last turn")
	}
	c.Remove(8)
	if _, ok := c.Get(8); !ok {
		t.Fatal("forgotten while a user is left")
	}
	c.Remove(8)
	if _, ok := c.Get(8); ok {
		t.Fatal("kept after its last user")
	}
}
