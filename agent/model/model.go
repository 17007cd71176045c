package model

import (
	"math"
	"time"
)

// Counters are the cumulative counters of one watched thread, as the BPF
// programs keep them (nanoseconds, CLOCK_MONOTONIC timestamps).
type Counters struct {
	RunNs, OffCPUNs, RunnableWaitNs uint64
	Switches, Preemptions, Wakeups  uint64
	Throttles                       uint64 // switch-outs for lack of bandwidth quota
	OnCPU                           bool
	SwitchInNs                      uint64 // last switch-in
	CPU                             int    // CPU of the last switch-in
	Run, Slice, OffCPU, Wake        Hist
	QuotaRun                        Hist // on-CPU time between throttles
}

// Sub returns the counters accumulated between prev and c. State fields
// (OnCPU, SwitchInNs, CPU) are taken from c.
func (c *Counters) Sub(prev *Counters) Counters {
	d := Counters{
		RunNs:          sub(c.RunNs, prev.RunNs),
		OffCPUNs:       sub(c.OffCPUNs, prev.OffCPUNs),
		RunnableWaitNs: sub(c.RunnableWaitNs, prev.RunnableWaitNs),
		Switches:       sub(c.Switches, prev.Switches),
		Preemptions:    sub(c.Preemptions, prev.Preemptions),
		Wakeups:        sub(c.Wakeups, prev.Wakeups),
		Throttles:      sub(c.Throttles, prev.Throttles),
		OnCPU:          c.OnCPU,
		SwitchInNs:     c.SwitchInNs,
		CPU:            c.CPU,
		Run:            c.Run.Sub(&prev.Run),
		Slice:          c.Slice.Sub(&prev.Slice),
		OffCPU:         c.OffCPU.Sub(&prev.OffCPU),
		Wake:           c.Wake.Sub(&prev.Wake),
		QuotaRun:       c.QuotaRun.Sub(&prev.QuotaRun),
	}
	return d
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Corunner is a task group that took the CPU from a thread.
type Corunner struct {
	TGID          uint32  `json:"tgid"`
	Comm          string  `json:"comm"`
	Preemptions   uint64  `json:"preemptions"`
	WaitedSeconds float64 `json:"waited_seconds"`
}

// Thread is the discontinuity of one thread in a snapshot. Totals are
// since the thread was first watched; distributions and rates are over
// the snapshot's window. Durations are in the unit their name says;
// percentiles of an empty distribution are 0.
type Thread struct {
	TID  int `json:"tid"`
	VCPU int `json:"vcpu"` // -1: not a vCPU thread

	RunSeconds          float64 `json:"run_seconds"`
	OffCPUSeconds       float64 `json:"offcpu_seconds"`
	RunnableWaitSeconds float64 `json:"runnable_wait_seconds"`
	Switches            uint64  `json:"switches"`
	Preemptions         uint64  `json:"preemptions"`
	Wakeups             uint64  `json:"wakeups"`
	// Throttles counts switch-outs because the thread's cgroup ran out
	// of CPU bandwidth quota.
	Throttles uint64 `json:"throttles"`

	RunP50US    float64 `json:"run_p50_us"`
	RunP90US    float64 `json:"run_p90_us"`
	RunP99US    float64 `json:"run_p99_us"`
	OffCPUP50US float64 `json:"offcpu_p50_us"`
	OffCPUP90US float64 `json:"offcpu_p90_us"`
	OffCPUP99US float64 `json:"offcpu_p99_us"`
	WakeP50US   float64 `json:"wake_p50_us"`
	WakeP90US   float64 `json:"wake_p90_us"`
	WakeP99US   float64 `json:"wake_p99_us"`
	// SliceP50US is the median run length that ended in a preemption: the
	// slice the thread gets under contention.
	SliceP50US float64 `json:"slice_p50_us"`
	// QuotaRunP50US is the median on-CPU time between two throttles: the
	// bandwidth quota as the thread experiences it (0: never throttled).
	QuotaRunP50US float64 `json:"quota_run_p50_us"`

	PreemptionsPerSecond float64 `json:"preemptions_per_second"`
	// StealFraction is the share of wall time the thread spent runnable
	// but not running (the host-side view of a guest's steal time).
	StealFraction float64 `json:"steal_fraction"`

	// Contended is false when nothing took the CPU from the thread in the
	// window; its slice is then unbounded and the two fields below are
	// null (infinite).
	Contended        bool     `json:"contended"`
	ExpectedSliceUS  *float64 `json:"expected_slice_us"`
	RemainingSliceUS *float64 `json:"remaining_slice_us"`

	OnCPU     bool       `json:"on_cpu"`
	CPU       int        `json:"cpu"`
	Corunners []Corunner `json:"corunners,omitempty"`

	// Cumulative are the raw counters since the thread was first watched
	// (for the Prometheus histograms); not part of the JSON.
	Cumulative *Counters `json:"-"`
}

// Quota is a CPU bandwidth limit (zero: none).
type Quota struct{ PeriodUS, QuotaUS int64 }

// Analyze computes the discontinuity of a thread from its cumulative
// counters cur, the counters at the start of the window base, the window
// length and the current CLOCK_MONOTONIC time in ns.
func Analyze(tid, vcpu int, cur, base *Counters, window time.Duration, nowNs uint64, q Quota) Thread {
	d := cur.Sub(base)
	t := Thread{
		TID:                 tid,
		VCPU:                vcpu,
		RunSeconds:          ns2s(cur.RunNs),
		OffCPUSeconds:       ns2s(cur.OffCPUNs),
		RunnableWaitSeconds: ns2s(cur.RunnableWaitNs),
		Switches:            cur.Switches,
		Preemptions:         cur.Preemptions,
		Wakeups:             cur.Wakeups,
		Throttles:           cur.Throttles,
		RunP50US:            us(d.Run.Quantile(0.5)),
		RunP90US:            us(d.Run.Quantile(0.9)),
		RunP99US:            us(d.Run.Quantile(0.99)),
		OffCPUP50US:         us(d.OffCPU.Quantile(0.5)),
		OffCPUP90US:         us(d.OffCPU.Quantile(0.9)),
		OffCPUP99US:         us(d.OffCPU.Quantile(0.99)),
		WakeP50US:           us(d.Wake.Quantile(0.5)),
		WakeP90US:           us(d.Wake.Quantile(0.9)),
		WakeP99US:           us(d.Wake.Quantile(0.99)),
		SliceP50US:          us(d.Slice.Quantile(0.5)),
		QuotaRunP50US:       us(d.QuotaRun.Quantile(0.5)),
		OnCPU:               cur.OnCPU,
		CPU:                 cur.CPU,
		Cumulative:          cur,
	}
	if w := window.Seconds(); w > 0 {
		t.PreemptionsPerSecond = float64(d.Preemptions) / w
		t.StealFraction = math.Min(1, ns2s(d.RunnableWaitNs)/w)
	}
	exp, ok := ExpectedSlice(&d, q)
	t.Contended = ok
	if ok {
		rem := RemainingSlice(exp, cur, nowNs)
		e, r := exp.Seconds()*1e6, rem.Seconds()*1e6
		t.ExpectedSliceUS, t.RemainingSliceUS = &e, &r
	}
	return t
}

// ExpectedSlice is how long the thread can expect to run once it is on
// CPU, from the window's counters d: the median run length that ended in
// a preemption, capped by the bandwidth quota per period (the configured
// one, and the on-CPU time between throttles seen in the window). ok is
// false when nothing preempted the thread in the window (nothing else is
// runnable on its CPUs and no quota throttled it): the slice is then
// infinite.
func ExpectedSlice(d *Counters, q Quota) (exp time.Duration, ok bool) {
	if d.Preemptions == 0 || d.Slice.Count() == 0 {
		return 0, false
	}
	exp = time.Duration(d.Slice.Quantile(0.5))
	if q.QuotaUS > 0 {
		exp = min(exp, time.Duration(q.QuotaUS)*time.Microsecond)
	}
	if d.QuotaRun.Count() > 0 {
		exp = min(exp, time.Duration(d.QuotaRun.Quantile(0.5)))
	}
	return exp, true
}

// RemainingSlice is what is left of the expected slice now: all of it when
// the thread is off CPU (it gets a fresh slice when it runs), the rest
// after the time since its switch-in otherwise, never below 0.
func RemainingSlice(exp time.Duration, cur *Counters, nowNs uint64) time.Duration {
	if !cur.OnCPU || cur.SwitchInNs == 0 || nowNs < cur.SwitchInNs {
		return exp
	}
	ran := time.Duration(nowNs - cur.SwitchInNs)
	if ran >= exp {
		return 0
	}
	return exp - ran
}

func ns2s(ns uint64) float64 { return float64(ns) / 1e9 }

// us converts ns to µs, mapping "no data" (NaN) to 0 for JSON.
func us(ns float64) float64 {
	if math.IsNaN(ns) {
		return 0
	}
	return math.Round(ns/1e3*10) / 10
}

// Target is one target in a snapshot.
type Target struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	PeriodUS int64    `json:"period_us,omitempty"`
	QuotaUS  int64    `json:"quota_us,omitempty"`
	Threads  []Thread `json:"threads"`
}

// Snapshot is what `vgpu-probe agent --once --json` prints and
// /api/v1/snapshot serves.
type Snapshot struct {
	Time          time.Time `json:"time"`
	WindowSeconds float64   `json:"window_seconds"`
	// AttachMode is how the programs are attached: tp_btf or raw_tp.
	AttachMode string `json:"attach_mode"`
	// EventDrops counts switch events lost because the ring buffer was
	// full (timelines have gaps; counters are unaffected).
	EventDrops uint64   `json:"event_drops"`
	Targets    []Target `json:"targets"`
}

// TimelineEvent is one off-CPU interval of a watched thread, as served
// by /api/v1/timeline: it left the CPU at Out after running RunUS, and came
// back at In.
type TimelineEvent struct {
	Out time.Time `json:"out"`
	In  time.Time `json:"in"`
	// InMonoNs is the CLOCK_MONOTONIC time of In, as the kernel recorded it.
	InMonoNs uint64  `json:"in_mono_ns"`
	TID      uint32  `json:"tid"`
	VCPU     int     `json:"vcpu"`
	CPU      uint32  `json:"cpu"` // the CPU it came back on
	RunUS    float64 `json:"run_us"`
	OffUS    float64 `json:"off_us"`
	// Preempted: it left while still runnable; Throttled: because its
	// bandwidth quota ran out; Waited: the interval ended with a wait for
	// a CPU (preempted, or woken and kept waiting).
	Preempted bool `json:"preempted"`
	Throttled bool `json:"throttled"`
	Waited    bool `json:"waited"`
	// Who took the CPU when it was preempted (0 and "" otherwise; tgid 0
	// with a comm is the idle task: throttled).
	OtherTGID uint32 `json:"other_tgid"`
	OtherComm string `json:"other_comm"`
}
