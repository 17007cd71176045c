package hints

import (
	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// contendedFor: a thread not preempted or throttled for this long is
// taken to have its CPU to itself (agent/contention).
const contendedFor = contention.For

// minRunNs: an involuntary run shorter than this is a wake-up preemption
// by an interrupt handler thread, not the end of a slice; it is not learnt.
const minRunNs = contention.MinRunNs

// maxSliceNs bounds every finite slice published (readers reject more).
const maxSliceNs = 10_000_000_000

// thread is what the publisher knows about one hinted thread. Guarded by
// the publisher's mutex.
type thread struct {
	tid, slot    int
	hostTID      int // the kernel's tid (tid is 0 in a vCPU slot, found by CPU)
	page         *page
	switchIn     uint64
	switchOut    uint64
	state        uint8
	cpu          uint16
	outThrottled bool   // the last switch-out was a quota throttle
	slice        uint64 // EWMA of involuntary run lengths ended by a co-runner, 0 until the first

	// CPU bandwidth state the kernel had at a switch-in (BPF counters),
	// and the counters' on-CPU time since the last throttle.
	quota            quotaState
	runSinceThrottle uint64
	throttles        tickPhase // when its quota throttles came, in the tick

	// mapped: its process holds its page's live array (a connection on
	// the page's socket), and the BPF programs write its live block
	// there; the agent then writes the page's live block no more, until
	// userAfter once it is unmapped. tgid: its process (0: not looked up).
	// lastEst: the estimate block last written (times zeroed), so that
	// one is written only when it changes.
	mapped    bool
	tgid      int
	userAfter uint64
	lastEst   hintpage.Slot
	refreshed uint64 // the publisher's refresh that last published it
}

// quotaState is the bandwidth limit binding a thread at its switch-in at
// in: runtime left in the period (left, ns, negative when overdrawn), the
// quota and period, and when the pool is next refilled. quota 0: none.
type quotaState struct {
	in, quota, period, refill uint64
	left                      int64
}

// env is what render needs besides the thread: the target's configured
// bandwidth limit (0: none known), the kernel's tick (0: unknown), and
// the thread's contention (the tracker's record).
type env struct {
	quotaUS, periodUS uint32
	tick              uint64
	mitigation        uint32 // the thread's --mitigate slice, ns (0: none)
	cont              contention.Thread
}

// learn takes one completed off-CPU interval: the thread ran run ns until
// in-off, was off for off ns, came back at in (throttled: by its quota)
// on cpu; cl is what the interval was (contention.Tracker.Learn, which
// decides who counts as a co-runner). A co-runner's turn after a run of
// minRunNs or more is a sample of the slice; a throttle while running
// on, one of the tick's phase.
func (t *thread) learn(in, off, run uint64, throttled bool, cl contention.Class, cpu uint32, tick uint64) {
	if off > 0 && off <= in {
		t.switchOut = in - off
		switch {
		case cl == contention.Throttled && throttled:
			if tick > 0 && run >= minRunNs {
				// Throttled while running on: at a tick. A throttle
				// right at a switch-in (overdrawn) says nothing.
				t.throttles.add(t.switchOut, tick)
			}
		case cl == contention.Shared && run >= minRunNs:
			if t.slice == 0 {
				t.slice = run
			} else {
				t.slice = t.slice - t.slice/8 + run/8
			}
		}
	}
	if in >= t.switchIn {
		t.switchIn, t.state, t.cpu = in, hintpage.StateRunning, uint16(cpu)
		t.outThrottled = throttled
	}
}

// observe takes the thread's state from the BPF counters, which are ahead
// of the events (the kernel writes them at the switch itself). A thread
// that is off its CPU because self (this process: the event reader, woken
// on its CPU) took it is left running: it is back as soon as the reader
// is done.
func (t *thread) observe(st *bpf.SchedThreadStats, self uint32) {
	switch {
	case st.OnCpu != 0 && st.SwitchInNs >= t.switchIn:
		t.switchIn, t.state, t.cpu = st.SwitchInNs, hintpage.StateRunning, uint16(st.Cpu)
		t.outThrottled = st.OutThrottled != 0
	case st.OnCpu == 0 && st.OutPreempted != 0 && st.OutThrottled == 0 && st.ReplacerTgid == self && self != 0:
	case st.OnCpu == 0 && st.SwitchOutNs >= t.switchIn && st.SwitchOutNs > 0:
		t.switchOut = st.SwitchOutNs
		t.state = hintpage.StateSleeping
		if st.OutPreempted != 0 {
			t.state = hintpage.StatePreempted
		}
		t.outThrottled = st.OutThrottled != 0
	}
	if st.SwitchInNs == t.switchIn && st.SwitchInNs != 0 {
		t.quota = quotaState{in: st.SwitchInNs, quota: st.QuotaNs, period: st.QuotaPeriodNs,
			refill: st.QuotaRefillNs, left: st.QuotaLeftNs}
		t.runSinceThrottle = st.RunSinceThrottleNs
	}
}

// quotaEnd returns when the thread's run that began at in is expected to
// end because its cgroup's CPU bandwidth quota runs out, and false when
// the quota does not bound it (none known, or more quota than period).
//
// With the kernel's own state at the switch-in (the runtime its cgroup
// had left in this period): the runtime is spent at in + left, and the
// runqueue is throttled at the next tick, which comes at the phase its
// earlier throttles came at. If the pool is refilled before that, the run
// goes on into the next period with a whole quota. Without it, from the
// target's configured quota: quota - on-CPU time since the last throttle
// (the runtime the thread alone used of this period's quota, if it was
// throttled in the previous one).
func (t *thread) quotaEnd(e env) (uint64, bool) {
	in := t.switchIn
	var exhaust uint64
	switch q := t.quota; {
	case q.quota != 0 && q.in == in:
		if q.quota >= q.period {
			return 0, false
		}
		if q.left <= 0 {
			return in, true // throttled at once
		}
		exhaust = in + uint64(q.left)
		if q.refill > in && exhaust > q.refill {
			exhaust = q.refill + q.quota
		}
	case e.quotaUS != 0 && e.periodUS != 0 && e.quotaUS < e.periodUS:
		used := t.runSinceThrottle
		if q := uint64(e.quotaUS) * 1000; used < q {
			exhaust = in + q - used
		} else {
			return in, true
		}
	default:
		return 0, false
	}
	if ph, ok := t.throttles.phase(e.tick); ok {
		return hintpage.NextTick(exhaust, e.tick, ph), true
	}
	return exhaust, true
}

// render renders the thread's hint at now: both blocks of its slot (the
// live block is written from it only where the BPF programs cannot write
// it themselves).
//
// Readers derive the expected length of the run that began at the
// switch-in (hintpage.Slot.Expected), so that expected - (now -
// switch-in) is the time left:
//   - shared (another task took the CPU in the last 500 ms): the learnt
//     slice (EWMA of the runs other tasks ended), capped by the quota;
//   - throttled: until the quota runs out: the live block's quota end
//     (the kernel's bandwidth state at the switch-in), put on the tick at
//     the phase of this thread's earlier throttles; without that state,
//     QuotaRunNs (quotaAhead);
//   - both: the shorter.
//
// The mitigation slice is published unless the thread is known to have
// its CPU to itself.
func (t *thread) render(now uint64, e env) hintpage.Slot {
	s := hintpage.Slot{TID: uint32(t.tid), SwitchInNs: min(t.switchIn, now), SwitchOutNs: t.switchOut,
		PublishNs: now, QuotaUS: e.quotaUS, PeriodUS: e.periodUS, State: t.state, CPU: t.cpu,
		TickNs: uint32(min(e.tick, 1_000_000_000/24)), MitigationNs: e.mitigation}
	if q := t.quota; (s.QuotaUS == 0 || s.PeriodUS == 0) && q.quota != 0 {
		// The target did not say; the kernel did.
		s.QuotaUS, s.PeriodUS = clampU32(int64(q.quota/1000)), clampU32(int64(q.period/1000))
	}
	if s.QuotaUS == 0 || s.PeriodUS == 0 {
		s.QuotaUS, s.PeriodUS = 0, 0
	}
	if end, ok := t.kernelQuotaEnd(); ok {
		s.QuotaEndNs = min(max(end, s.SwitchInNs), s.SwitchInNs+maxSliceNs)
	}
	throttled, shared := e.cont.Throttled(now), e.cont.Shared(now)
	switch {
	case throttled && !shared:
		s.Contention = hintpage.ContThrottled
	case shared:
		s.Contention = hintpage.ContShared
	case e.cont.Free(now):
		s.Contention = hintpage.ContFree
	}
	if s.Contention == hintpage.ContFree {
		// The slice is news only where the thread contends: alone it
		// changes no wake-up, and a reader told of it prices blocking
		// as if it did, blocking where spinning is better.
		s.MitigationNs = 0
		s.SliceNs = hintpage.Infinite
		s.ExpectedSliceNs = s.Expected()
		return s
	}
	if shared && t.slice != 0 {
		exp := t.slice
		if q := uint64(e.quotaUS) * 1000; q > 0 && q < exp {
			exp = q
		}
		// At least 1 ns: 0 would say "not known".
		s.SliceNs = max(min(exp, maxSliceNs), 1)
	}
	if throttled {
		s.EstFlags |= hintpage.EstQuotaBound
		if ph, ok := t.throttles.phase(e.tick); ok && s.TickNs != 0 && ph < uint64(s.TickNs) {
			s.EstFlags |= hintpage.EstTickPhase
			s.TickPhaseNs = uint32(ph)
		}
		if qa, ok := t.quotaAhead(now, e); ok {
			s.QuotaRunNs = max(min(qa, maxSliceNs), 1)
		}
	}
	s.ExpectedSliceNs = s.Expected()
	return s
}

// kernelQuotaEnd is when the run that began at the switch-in spends the
// quota, from the kernel's bandwidth state at that switch-in, without the
// tick (what the BPF programs write as the live block's quota end).
func (t *thread) kernelQuotaEnd() (uint64, bool) {
	q, in := t.quota, t.switchIn
	if q.quota == 0 || q.in != in || in == 0 || q.quota >= q.period {
		return 0, false
	}
	if q.left <= 0 {
		return in, true
	}
	e := in + uint64(q.left)
	if q.refill > in && e > q.refill {
		e = q.refill + q.quota
	}
	return e, true
}

// quotaAhead is the quota's bound on the current run (running: its
// expected length from the switch-in) or on the next one (off CPU: a
// whole quota after a throttle, what is left of it otherwise).
func (t *thread) quotaAhead(now uint64, e env) (uint64, bool) {
	if t.state == hintpage.StateRunning {
		end, ok := t.quotaEnd(e)
		if !ok {
			return 0, false
		}
		return max(end, t.switchIn) - t.switchIn, true
	}
	q := t.quota
	switch {
	case q.quota != 0 && q.quota < q.period:
		if !t.outThrottled && q.in == t.switchIn && t.switchOut > q.in && q.refill > now {
			// Preempted within the period: what was left at the
			// switch-in less the run since.
			if left := q.left - int64(t.switchOut-q.in); left > 0 {
				return uint64(left), true
			}
		}
		return q.quota, true
	case q.quota == 0 && e.quotaUS != 0 && e.quotaUS < e.periodUS:
		return uint64(e.quotaUS) * 1000, true
	}
	return 0, false
}
