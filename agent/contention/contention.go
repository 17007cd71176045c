package contention

import (
	"sync"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// For is how long a co-runner's turn (or a throttle) keeps a thread
// contended, ns: a thread whose CPU no other process took for this long
// is taken to have it to itself (the same span after which the guest
// estimator forgets its slice, and CONTENDED_NS in bpf/sched.bpf.c).
const For = 500_000_000

// MinRunNs: an involuntary run shorter than this is a wake-up preemption
// by an interrupt handler thread, not the end of a slice.
const MinRunNs = 100_000

// QuietOffNs: an involuntary off-CPU interval shorter than this is an
// interruption, not a co-runner's turn (QUIET_OFF_NS in bpf/sched.bpf.c).
const QuietOffNs = 100_000

// Class is what one completed off-CPU interval says about the thread's
// CPU.
type Class uint8

const (
	// None: a sleep, an interruption, a preemption by the agent's own
	// process or, for a thread that is not a vCPU, by its own program.
	None Class = iota
	// Shared: another process's task took the CPU, a co-runner's turn.
	Shared
	// Throttled: the CPU bandwidth quota held the thread back.
	Throttled
)

// Interval is one completed off-CPU interval: the thread ran Run ns
// until In-Off, was off for Off ns and came back at In. Preempted: it
// left runnable, to a task of process Other (0: the idle task);
// Throttled: its quota ran out. Own is the thread's own process.
type Interval struct {
	In, Off, Run         uint64
	Preempted, Throttled bool
	Other, Own           uint32
}

// Of is the interval a switch event reports.
func Of(ev *bpf.SchedSwitchEvent) Interval {
	return Interval{In: ev.InNs, Off: ev.OffNs, Run: ev.RunNs, Preempted: ev.Preempted != 0,
		Throttled: ev.Throttled != 0, Other: ev.OtherTgid, Own: ev.Tgid}
}

// Thread is one thread's contention: when its CPU was last taken by a
// co-runner, and last held back by the quota. The zero value is a thread
// of a program (not a vCPU), watched since time 0.
type Thread struct {
	// VCPU: the thread is a VM's vCPU, whose own process (the VM's other
	// vCPUs) does compete for its CPU.
	VCPU bool
	// Since is when it was first watched; LastShared and LastThrottled
	// when the latest co-runner's turn and throttle began (0: none).
	Since, LastShared, LastThrottled uint64
	throttledIn                      uint64 // the switch-in that ended the last throttle
}

// Learn classifies one interval and records it; self is the agent's own
// process (its event reader, its refresh), which is no co-runner. Nor,
// for a thread that is not a vCPU, is the thread's own process: the
// program's other threads (the GPU driver's helper woken at a
// completion, a runtime's) take its CPU for moments, and counted, one
// such preemption in For read as a shared CPU beside no co-runner. A
// vCPU's own process is its VM, whose other vCPUs on the same physical
// CPU do compete for it.
//
// A thread whose live block the BPF programs write into its target's
// array sends a record only for the intervals this learns from (teaches
// in bpf/sched.bpf.c mirrors the cases below, and must change with them):
// off > 0 and throttled; preempted with other == 0; preempted by another
// process than self with off >= QuietOffNs (a program's own process
// among them, which teaches nothing here).
func (t *Thread) Learn(iv Interval, self uint32) Class {
	if iv.Off == 0 || iv.Off > iv.In {
		return None
	}
	out := iv.In - iv.Off
	switch {
	case iv.Throttled:
		t.LastThrottled, t.throttledIn = out, iv.In
		return Throttled
	case iv.Preempted && iv.Other == 0:
		// Runnable, and the CPU went idle: held back by the quota (a
		// second switch-out in one throttled period, which the
		// programs count once).
		t.LastThrottled = out
		return Throttled
	case iv.Preempted && iv.Run < MinRunNs && out-iv.Run == t.throttledIn:
		// The same second switch-out with another task next: a
		// throttled task goes back in to finish in the kernel and is
		// held at its return to user space (since Linux 6.18), which
		// the programs do not count again. Its off time is the
		// throttle's rest (ms), whoever ran next (a softirq thread, an
		// unrelated process); read as a co-runner's turn, it made a
		// quota alone look shared.
		t.LastThrottled = out
		return Throttled
	case iv.Preempted && iv.Other == iv.Own && !t.VCPU:
		// The program's own thread (see above).
		return None
	case iv.Preempted && iv.Other != self && iv.Off >= QuietOffNs:
		t.LastShared = out
		return Shared
	}
	return None
}

// Shared reports whether a co-runner took the thread's CPU within For
// before now.
func (t *Thread) Shared(now uint64) bool { return recent(t.LastShared, now) }

// Throttled reports whether the quota held the thread back within For
// before now.
func (t *Thread) Throttled(now uint64) bool { return recent(t.LastThrottled, now) }

// Free reports whether the thread has its CPU to itself: watched for
// For, and neither shared nor throttled in that time.
func (t *Thread) Free(now uint64) bool {
	return now-min(t.Since, now) >= For && !t.Shared(now) && !t.Throttled(now)
}

func recent(at, now uint64) bool { return at != 0 && now-min(at, now) < For }

// Tracker is the contention of every thread someone watches, by tid.
// Safe for concurrent use.
type Tracker struct {
	self    uint32
	mu      sync.Mutex
	threads map[uint32]*entry
	shared  chan struct{}
}

type entry struct {
	Thread
	refs int
}

// NewTracker returns a tracker for the agent process self (whose tasks
// are no co-runners; 0: none).
func NewTracker(self uint32) *Tracker {
	return &Tracker{self: self, threads: map[uint32]*entry{}, shared: make(chan struct{}, 1)}
}

// Add starts (or counts one more user of) tid's record, watched from
// now; vcpu as Thread.VCPU. The first Add decides vcpu.
func (c *Tracker) Add(tid int, vcpu bool, now uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.threads[uint32(tid)]; e != nil {
		e.refs++
		return
	}
	c.threads[uint32(tid)] = &entry{Thread: Thread{VCPU: vcpu, Since: now}, refs: 1}
}

// Remove drops one user of tid's record; the last forgets it.
func (c *Tracker) Remove(tid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.threads[uint32(tid)]
	if e == nil {
		return
	}
	if e.refs--; e.refs <= 0 {
		delete(c.threads, uint32(tid))
	}
}

// Learn records the interval a switch event reports for its thread and
// returns its class (None for a thread nobody added). A thread that
// turns shared signals SharedNow.
func (c *Tracker) Learn(ev *bpf.SchedSwitchEvent) Class {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.threads[ev.Tid]
	if e == nil {
		return None
	}
	iv := Of(ev)
	was := e.Shared(iv.In)
	cl := e.Learn(iv, c.self)
	if cl == Shared && !was {
		select {
		case c.shared <- struct{}{}:
		default:
		}
	}
	return cl
}

// OnEvent is Learn for monitor.Options.OnEvent.
func (c *Tracker) OnEvent(ev *bpf.SchedSwitchEvent) { c.Learn(ev) }

// Get returns tid's record (ok false for a thread nobody added).
func (c *Tracker) Get(tid int) (Thread, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.threads[uint32(tid)]
	if e == nil {
		return Thread{}, false
	}
	return e.Thread, true
}

// Shared reports whether a co-runner took tid's CPU within For before
// now (false for a thread nobody added).
func (c *Tracker) Shared(tid int, now uint64) bool {
	t, ok := c.Get(tid)
	return ok && t.Shared(now)
}

// SharedNow receives a value (at most one pending) when a thread turns
// shared, so that a reader of the verdicts need not poll fast.
func (c *Tracker) SharedNow() <-chan struct{} { return c.shared }
