package hints

import "github.com/vgpu-probe/vgpu-probe/hintpage"

// contendedFor: a thread not preempted or throttled for this long is
// taken to have its CPU to itself (the same span after which the guest
// estimator forgets its slice).
const contendedFor = 500_000_000

// minRunNs: an involuntary run shorter than this is a wake-up preemption
// by an interrupt handler thread, not the end of a slice; it is not learnt.
const minRunNs = 100_000

// thread is what the publisher knows about one hinted thread. Guarded by
// the publisher's mutex.
type thread struct {
	tid, slot   int
	page        *page
	switchIn    uint64
	switchOut   uint64
	state       uint8
	cpu         uint16
	slice       uint64 // EWMA of involuntary run lengths, 0 until the first
	lastShared  uint64 // last switch-out to another task
	lastThrottl uint64 // last switch-out by the bandwidth quota
	since       uint64 // when first watched
}

// learn takes one completed off-CPU interval: the thread ran run ns until
// in-off, was off for off ns, came back at in.
func (t *thread) learn(in, off, run uint64, preempted, throttled bool, cpu uint32) {
	if off > 0 && off <= in {
		t.switchOut = in - off
		if preempted && run >= minRunNs {
			if t.slice == 0 {
				t.slice = run
			} else {
				t.slice = t.slice - t.slice/8 + run/8
			}
		}
		switch {
		case throttled:
			t.lastThrottl = t.switchOut
		case preempted:
			t.lastShared = t.switchOut
		}
	}
	if in >= t.switchIn {
		t.switchIn, t.state, t.cpu = in, hintpage.StateRunning, uint16(cpu)
	}
}

// slot renders the thread's hint at now.
func (t *thread) render(now uint64, quotaUS, periodUS uint32) hintpage.Slot {
	s := hintpage.Slot{TID: uint32(t.tid), SwitchInNs: min(t.switchIn, now), SwitchOutNs: t.switchOut,
		PublishNs: now, QuotaUS: quotaUS, PeriodUS: periodUS, State: t.state, CPU: t.cpu}
	if quotaUS == 0 || periodUS == 0 {
		s.QuotaUS, s.PeriodUS = 0, 0
	}
	recent := func(at uint64) bool { return at != 0 && now-at < contendedFor }
	switch {
	case recent(t.lastThrottl) && !recent(t.lastShared):
		s.Contention = hintpage.ContThrottled
	case recent(t.lastShared) || recent(t.lastThrottl):
		s.Contention = hintpage.ContShared
	case now-t.since >= contendedFor:
		s.Contention = hintpage.ContFree
	}
	switch {
	case s.Contention == hintpage.ContFree:
		s.ExpectedSliceNs, s.RemainingNs = hintpage.Infinite, hintpage.Infinite
	case t.slice == 0 || s.Contention == hintpage.ContUnknown:
		// Nothing learnt yet: readers fall back to their own estimate.
	default:
		s.ExpectedSliceNs = min(t.slice, 10_000_000_000)
		if q := uint64(s.QuotaUS) * 1000; q > 0 && q < s.ExpectedSliceNs {
			s.ExpectedSliceNs = q
		}
		s.RemainingNs = s.ExpectedSliceNs
		if s.State == hintpage.StateRunning {
			s.RemainingNs = s.ExpectedSliceNs - min(s.ExpectedSliceNs, now-s.SwitchInNs)
		}
	}
	return s
}
