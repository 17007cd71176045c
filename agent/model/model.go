package model

import (
	"math"
	"slices"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
)

// Counters are the cumulative counters of one watched thread at one
// moment, from its two sources.
type Counters struct {
	// Kernel is the kernel's own accounting: exact and continuous. Totals
	// and rates come from it.
	Kernel procstat.Counters
	// Traced is what the BPF programs saw during trace windows: the
	// distributions, co-runners and throttles.
	Traced Traced
}

// Sub returns the counters accumulated between prev and c.
func (c *Counters) Sub(prev *Counters) Counters {
	return Counters{Kernel: c.Kernel.Sub(prev.Kernel), Traced: c.Traced.Sub(&prev.Traced)}
}

// Traced are the counters the BPF programs keep for a thread (nanoseconds,
// CLOCK_MONOTONIC timestamps); they grow only while the programs are
// attached.
type Traced struct {
	RunNs, OffCPUNs, RunnableWaitNs uint64
	Switches, Preemptions, Wakeups  uint64
	Throttles                       uint64 // switch-outs for lack of bandwidth quota
	OnCPU                           bool
	SwitchInNs                      uint64 // last switch-in
	SwitchOutNs                     uint64 // last switch-out
	CPU                             int    // CPU of the last switch-in
	Run, Slice, OffCPU, Wake        Hist
	QuotaRun                        Hist // on-CPU time between throttles
	// Exit are the kernel's counters of the thread as it left the CPU for
	// the last time, at ExitNs (0: not seen exiting).
	ExitNs uint64
	Exit   procstat.Counters
}

// Sub returns the counts accumulated between prev and c. State fields
// (OnCPU, SwitchInNs, SwitchOutNs, CPU, ExitNs, Exit) are taken from c.
func (c *Traced) Sub(prev *Traced) Traced {
	d := Traced{
		RunNs:          sub(c.RunNs, prev.RunNs),
		OffCPUNs:       sub(c.OffCPUNs, prev.OffCPUNs),
		RunnableWaitNs: sub(c.RunnableWaitNs, prev.RunnableWaitNs),
		Switches:       sub(c.Switches, prev.Switches),
		Preemptions:    sub(c.Preemptions, prev.Preemptions),
		Wakeups:        sub(c.Wakeups, prev.Wakeups),
		Throttles:      sub(c.Throttles, prev.Throttles),
		OnCPU:          c.OnCPU,
		SwitchInNs:     c.SwitchInNs,
		SwitchOutNs:    c.SwitchOutNs,
		CPU:            c.CPU,
		Run:            c.Run.Sub(&prev.Run),
		Slice:          c.Slice.Sub(&prev.Slice),
		OffCPU:         c.OffCPU.Sub(&prev.OffCPU),
		Wake:           c.Wake.Sub(&prev.Wake),
		QuotaRun:       c.QuotaRun.Sub(&prev.QuotaRun),
		ExitNs:         c.ExitNs,
		Exit:           c.Exit,
	}
	return d
}

// Exited returns the final counters of a thread that has exited, and
// when it left the CPU for the last time (CLOCK_MONOTONIC; 0 when the
// programs did not see it), from the counters last read from both sources
// (last, at lastNs) and what the programs count for it now (tr). Where
// the programs saw it exit they read the kernel's counters then;
// otherwise (it exited outside a trace window) the kernel's counters,
// which go with the thread, are the last read advanced by what the
// programs saw since lastNs, and whatever the thread did outside trace
// windows since then is missing.
func Exited(last *Counters, lastNs uint64, tr *Traced) (c Counters, exitNs uint64) {
	if tr.ExitNs > lastNs {
		return Counters{Kernel: tr.Exit, Traced: *tr}, tr.ExitNs
	}
	d := tr.Sub(&last.Traced)
	k := last.Kernel
	k.RunNs += runSince(&last.Traced, lastNs, tr)
	k.RunDelayNs += d.RunnableWaitNs
	k.Timeslices += d.Switches
	k.Involuntary += d.Preemptions
	k.Voluntary += d.Wakeups // each sleep ends with a wake-up
	if !tr.OnCPU && tr.SwitchOutNs > lastNs {
		exitNs = tr.SwitchOutNs
	}
	return Counters{Kernel: k, Traced: *tr}, exitNs
}

// runSince is the time a thread ran between lastNs, when its counters
// were last and the kernel's were read, and its last switch-out seen in
// tr. The programs count an on-CPU interval when it ends, from its
// switch-in, and not at all when they did not see it begin (the thread was
// on CPU when watched or when tracing resumed): the interval open at
// lastNs needs care, as a busy thread may run in one for seconds.
func runSince(last *Traced, lastNs uint64, tr *Traced) uint64 {
	run := sub(tr.RunNs, last.RunNs)
	switch {
	case tr.SwitchOutNs > lastNs && tr.Switches == last.Switches:
		// Switched out since, never in: it was on CPU from lastNs to
		// then.
		return tr.SwitchOutNs - lastNs
	case tr.SwitchOutNs > lastNs && last.OnCPU && last.SwitchInNs != 0 && last.SwitchInNs < lastNs:
		// The interval open at lastNs has ended and was counted from its
		// switch-in; the kernel had its part before lastNs already.
		return sub(run, lastNs-last.SwitchInNs)
	}
	return run
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Corunner is a task group that took the CPU from a thread.
type Corunner struct {
	TGID uint32 `json:"tgid"`
	Comm string `json:"comm"`
	// Key is the stable name it is attributed to (see CorunnerWait.Key).
	Key           string  `json:"key"`
	Preemptions   uint64  `json:"preemptions"`
	WaitedSeconds float64 `json:"waited_seconds"`
}

// Keys of co-runners that are not a task group's own.
const (
	// CorunnerThrottled is the idle task: the thread was throttled by CPU
	// bandwidth control and nothing else wanted the CPU.
	CorunnerThrottled = "(throttled)"
	// CorunnerSelf is the target's own process (another of its threads).
	CorunnerSelf = "(self)"
	// CorunnerOther sums the keys beyond a target's cap.
	CorunnerOther = "(other)"
)

// CorunnerWait is how long a target's threads waited, since they were
// first watched and while tracing, behind one co-runner key.
type CorunnerWait struct {
	// Key is stable for as long as the co-runner lives: the domain name
	// when it is a thread of a watched domain's process, else its cgroup
	// path (starting with "/"), or one of CorunnerThrottled, CorunnerSelf
	// and CorunnerOther. A
	// domain name never contains "/", so the two cannot be confused.
	Key           string  `json:"key"`
	Preemptions   uint64  `json:"preemptions"`
	WaitedSeconds float64 `json:"waited_seconds"`
}

// Thread is the discontinuity of one thread in a snapshot. Totals are
// since the thread was first watched, from the kernel's accounting;
// rates are over the snapshot's window, from the same; distributions,
// co-runners and throttles are over the trace windows within the
// snapshot's window (Snapshot.TracedSeconds of it). Durations are in the
// unit their name says; percentiles of an empty distribution are 0.
type Thread struct {
	TID  int `json:"tid"`
	VCPU int `json:"vcpu"` // -1: not a vCPU thread

	RunSeconds          float64 `json:"run_seconds"`
	OffCPUSeconds       float64 `json:"offcpu_seconds"`
	RunnableWaitSeconds float64 `json:"runnable_wait_seconds"`
	Switches            uint64  `json:"switches"`
	Preemptions         uint64  `json:"preemptions"`
	// Wakeups counts voluntary switch-outs (sleeps): each ends with one.
	Wakeups uint64 `json:"wakeups"`
	// Throttles counts switch-outs, seen while tracing, because the
	// thread's cgroup ran out of CPU bandwidth quota.
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

	// OnCPU is whether the thread is on a CPU now; false between trace
	// windows (unknown), when the remaining slice is the whole expected
	// slice. CPU is where it was last switched in while tracing.
	OnCPU bool `json:"on_cpu"`
	CPU   int  `json:"cpu"`
	// Corunners took the CPU from it while tracing.
	Corunners []Corunner `json:"corunners,omitempty"`

	// Gone: the thread exited, or left its target, at GoneAt: when the
	// programs saw it leave the CPU for the last time (always with
	// --once), else when the agent noticed (a rescan, 2 s, or a sample
	// later). Its totals are up to then, its rates over the window that
	// ended then; what it did outside trace windows since the last sample
	// is missing from them.
	Gone   bool      `json:"gone,omitempty"`
	GoneAt time.Time `json:"gone_at,omitzero"`

	// Cumulative are the counters since the thread was first watched
	// (for the Prometheus histograms; nil once the thread is gone); not
	// part of the JSON.
	Cumulative *Counters `json:"-"`
}

// Quota is a CPU bandwidth limit (zero: none).
type Quota struct{ PeriodUS, QuotaUS int64 }

// Input is what Analyze needs to know of one thread.
type Input struct {
	TID, VCPU int
	// Cur are the counters now, Start when the thread was first watched,
	// WindowStart at the start of the window.
	Cur, Start, WindowStart *Counters
	// Watched is the time since the thread was first watched, Window the
	// span rates and distributions are over.
	Watched, Window time.Duration
	NowNs           uint64 // CLOCK_MONOTONIC
	// Tracing: the programs are attached, so the on-CPU state in
	// Cur.Traced is current.
	Tracing bool
	Quota   Quota
}

// Analyze computes the discontinuity of a thread.
func Analyze(in Input) Thread {
	total := in.Cur.Sub(in.Start)
	d := in.Cur.Sub(in.WindowStart)
	k, tr := &total.Kernel, &d.Traced
	run := ns2s(k.RunNs)
	t := Thread{
		TID:                 in.TID,
		VCPU:                in.VCPU,
		RunSeconds:          run,
		OffCPUSeconds:       math.Max(0, in.Watched.Seconds()-run),
		RunnableWaitSeconds: ns2s(k.RunDelayNs),
		Switches:            k.Timeslices,
		Preemptions:         k.Involuntary,
		Wakeups:             k.Voluntary,
		Throttles:           total.Traced.Throttles,
		RunP50US:            us(tr.Run.Quantile(0.5)),
		RunP90US:            us(tr.Run.Quantile(0.9)),
		RunP99US:            us(tr.Run.Quantile(0.99)),
		OffCPUP50US:         us(tr.OffCPU.Quantile(0.5)),
		OffCPUP90US:         us(tr.OffCPU.Quantile(0.9)),
		OffCPUP99US:         us(tr.OffCPU.Quantile(0.99)),
		WakeP50US:           us(tr.Wake.Quantile(0.5)),
		WakeP90US:           us(tr.Wake.Quantile(0.9)),
		WakeP99US:           us(tr.Wake.Quantile(0.99)),
		SliceP50US:          us(tr.Slice.Quantile(0.5)),
		QuotaRunP50US:       us(tr.QuotaRun.Quantile(0.5)),
		OnCPU:               in.Tracing && in.Cur.Traced.OnCPU,
		CPU:                 in.Cur.Traced.CPU,
		Cumulative:          &total,
	}
	if w := in.Window.Seconds(); w > 0 {
		t.PreemptionsPerSecond = float64(d.Kernel.Involuntary) / w
		t.StealFraction = math.Min(1, ns2s(d.Kernel.RunDelayNs)/w)
	}
	exp, ok := expectedSlice(tr, in.Quota)
	t.Contended = ok
	if ok {
		rem := exp
		if t.OnCPU {
			rem = remainingSlice(exp, &in.Cur.Traced, in.NowNs)
		}
		e, r := exp.Seconds()*1e6, rem.Seconds()*1e6
		t.ExpectedSliceUS, t.RemainingSliceUS = &e, &r
	}
	return t
}

// expectedSlice is how long the thread can expect to run once it is on
// CPU, from the window's traced counters d: the median run length that
// ended in a preemption, capped by the bandwidth quota per period (the
// configured one, and the on-CPU time between throttles seen in the
// window). ok is false when nothing preempted the thread while it was
// traced in the window (nothing else is runnable on its CPUs and no quota
// throttled it): the slice is then infinite.
func expectedSlice(d *Traced, q Quota) (exp time.Duration, ok bool) {
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

// remainingSlice is what is left of the expected slice now: all of it when
// the thread is off CPU (it gets a fresh slice when it runs), the rest
// after the time since its switch-in otherwise, never below 0.
func remainingSlice(exp time.Duration, cur *Traced, nowNs uint64) time.Duration {
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
	// Corunners are the co-runners of all its threads by key, capped (the
	// cap's first keys stay, the rest are summed as CorunnerOther), sorted
	// by key.
	Corunners []CorunnerWait `json:"corunners,omitempty"`
	// Gone: the process exited, the cgroup was removed or the domain
	// stopped, at GoneAt (when its last thread went, or when the agent
	// noticed). Its threads are all gone and hold their measurements up
	// to then.
	Gone   bool      `json:"gone,omitempty"`
	GoneAt time.Time `json:"gone_at,omitzero"`
}

// Snapshot is what `vgpu-probe agent --once --json` prints and
// /api/v1/snapshot serves.
type Snapshot struct {
	Time          time.Time `json:"time"`
	WindowSeconds float64   `json:"window_seconds"`
	// TracedSeconds is how much of the window the BPF programs were
	// attached: distributions are over that much time.
	TracedSeconds float64 `json:"traced_seconds"`
	// TracedTotalSeconds is the same since the agent started.
	TracedTotalSeconds float64 `json:"traced_total_seconds"`
	// Tracing is whether the programs are attached now.
	Tracing bool `json:"tracing"`
	// AttachMode is how the programs are attached: tp_btf or raw_tp.
	AttachMode string `json:"attach_mode"`
	// EventDrops counts switch events lost because the ring buffer was
	// full (timelines have gaps; counters are unaffected).
	EventDrops uint64 `json:"event_drops"`
	// Targets are sorted by kind and name, which are unique together: a
	// target that went (Gone) is dropped when it comes back.
	Targets []Target `json:"targets"`
}

// Live returns the snapshot without the targets and threads that are gone
// (what the metrics are made of: a gone target's series end when it goes).
func (s Snapshot) Live() Snapshot {
	live := make([]Target, 0, len(s.Targets))
	for _, t := range s.Targets {
		if t.Gone {
			continue
		}
		t.Threads = slices.DeleteFunc(slices.Clone(t.Threads), func(th Thread) bool { return th.Gone })
		live = append(live, t)
	}
	s.Targets = live
	return s
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
