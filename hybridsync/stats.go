package hybridsync

import (
	"sort"
	"sync/atomic"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// kernelCounters are the per-kernel stats; every field is updated with
// atomic adds by whichever thread's Sync finished.
type kernelCounters struct {
	calls, ready, spinHits, sleepSpinHits, blocks atomic.Uint64
	spinNs, sleepNs, blockNs                      atomic.Int64
}

func (k *kernelCounters) add(c *call) {
	k.calls.Add(1)
	switch c.end {
	case endSpin:
		k.spinHits.Add(1)
	case endSleepSpin:
		k.sleepSpinHits.Add(1)
	default:
		k.blocks.Add(1)
	}
	k.spinNs.Add(c.spun)
	k.sleepNs.Add(c.slept)
	k.blockNs.Add(c.blocked)
}

// Counts are the stats of one kernel, or of all.
type Counts struct {
	Calls         uint64 `json:"calls"`
	Ready         uint64 `json:"ready"`           // already complete when Sync was called
	SpinHits      uint64 `json:"spin_hits"`       // completed while spinning
	SleepSpinHits uint64 `json:"sleep_spin_hits"` // completed while spinning after a timed sleep
	Blocks        uint64 `json:"blocks"`          // ended in the blocking wait
	// Delegated: left to the device's own wait, as short (the C library
	// counts them; Sync never sees them).
	Delegated    uint64  `json:"delegated"`
	SpinSeconds  float64 `json:"spin_seconds"`
	SleepSeconds float64 `json:"sleep_seconds"`
	BlockSeconds float64 `json:"block_seconds"`
}

func (k *kernelCounters) counts() Counts {
	return Counts{
		Calls: k.calls.Load(), Ready: k.ready.Load(), SpinHits: k.spinHits.Load(),
		SleepSpinHits: k.sleepSpinHits.Load(), Blocks: k.blocks.Load(),
		SpinSeconds: sec(k.spinNs.Load()), SleepSeconds: sec(k.sleepNs.Load()), BlockSeconds: sec(k.blockNs.Load()),
	}
}

// Plus adds b to a.
func (a *Counts) Plus(b Counts) {
	a.Calls += b.Calls
	a.Delegated += b.Delegated
	a.Ready += b.Ready
	a.SpinHits += b.SpinHits
	a.SleepSpinHits += b.SleepSpinHits
	a.Blocks += b.Blocks
	a.SpinSeconds += b.SpinSeconds
	a.SleepSeconds += b.SleepSeconds
	a.BlockSeconds += b.BlockSeconds
}

func sec(ns int64) float64 { return float64(ns) / 1e9 }
func us(ns int64) float64  { return float64(ns) / 1e3 }

// KernelStats is one kernel's timing and counts.
type KernelStats struct {
	ID     KernelID `json:"id"`
	Name   string   `json:"name,omitempty"`
	MeanUS float64  `json:"mean_us"`
	DevUS  float64  `json:"dev_us"`
	Counts
}

// Stats is what a Syncer measured, as written to HYBRIDSYNC_STATS.
type Stats struct {
	Version int    `json:"version"`
	Mode    string `json:"mode"`
	Counts
	// TimerLateUS: how late timed sleeps woke after their deadline.
	TimerLateUS    float64 `json:"timer_late_us"`
	TimerLateDevUS float64 `json:"timer_late_dev_us"`
	TimerLateP75US float64 `json:"timer_late_p75_us"`
	// WakeLateUS: how late the blocking wait returned after completion
	// (only where the device reports completion times).
	WakeLateUS    float64 `json:"wake_late_us"`
	WakeLateDevUS float64 `json:"wake_late_dev_us"`
	WakeLateP75US float64 `json:"wake_late_p75_us"`
	SliceUS       float64 `json:"slice_us"` // learned time slice, 0 if none seen
	Deschedulings uint64  `json:"deschedulings"`
	DictDropped   uint64  `json:"dict_dropped"`
	// Contention counts the waits that had to wait by what the
	// contention signal said: free, throttled, shared, unknown.
	Contention map[string]uint64 `json:"contention"`
	// Sched is what the default contention signal saw (absent with
	// another source).
	Sched *signal.SchedTotals `json:"sched,omitempty"`
	// Hints counts the calls the host's hint page answered, and those
	// that fell back, by reason (HYBRIDSYNC_HINTS only).
	Hints *signal.HintStats `json:"hints,omitempty"`
	// Outcomes: the epochs of each arm where the C library's default
	// mode checks its choices against their outcomes (Engine.Outcomes;
	// absent elsewhere).
	Outcomes       *ArmStats     `json:"outcomes,omitempty"`
	UnknownKernels Counts        `json:"unknown_kernels"`
	Kernels        []KernelStats `json:"kernels"`
}

// StatsVersion is the format version of Stats.
const StatsVersion = 1

// Stats returns a snapshot of what s measured; names maps kernel ids to
// names where known (may be nil).
func (s *Syncer) Stats(names func(KernelID) string) Stats {
	st := Stats{Version: StatsVersion, Mode: s.mode.String(), DictDropped: s.dict.Dropped()}
	st.UnknownKernels = s.unknown.counts()
	st.Counts = st.UnknownKernels
	s.dict.each(func(k KernelID, e *entry) {
		t := unpack(e.timing.Load())
		ks := KernelStats{ID: k, MeanUS: us(t.Mean), DevUS: us(t.Dev), Counts: e.stats.counts()}
		if names != nil {
			ks.Name = names(k)
		}
		st.Counts.Plus(ks.Counts)
		st.Kernels = append(st.Kernels, ks)
	})
	sort.Slice(st.Kernels, func(i, j int) bool { return st.Kernels[i].ID < st.Kernels[j].ID })
	m, d, q := s.sleepLate.snapshot()
	st.TimerLateUS, st.TimerLateDevUS, st.TimerLateP75US = us(m), us(d), us(q)
	m, d, q = s.blockLate.snapshot()
	st.WakeLateUS, st.WakeLateDevUS, st.WakeLateP75US = us(m), us(d), us(q)
	st.Contention = map[string]uint64{}
	for i := range s.byState {
		st.Contention[signal.Contention(i).String()] = s.byState[i].Load()
	}
	switch c := s.cont.(type) {
	case *signal.SchedSignal:
		t := c.Totals()
		st.Sched = &t
	case *signal.HintSource:
		h := c.Stats()
		st.Hints = &h
	}
	if g, ok := s.thr.(*signal.GuestEstimator); ok {
		st.SliceUS, st.Deschedulings = us(g.Slice()), g.Gaps()
	}
	return st
}
