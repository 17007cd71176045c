package signal

import (
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/perthread"
)

// SchedSignal tells whether a thread competes for its CPU from the kernel's
// own accounting, which does not depend on the policy's spins (short spins
// rarely see the thread descheduled, so a signal learned from them says
// "free" exactly when spinning hurts):
//
//   - /proc/self/task/<tid>/schedstat: run_delay, the time the thread was
//     runnable but not running, and how many times it was scheduled in;
//   - the CPU bandwidth throttling of the process's cgroups (cpu.stat): a
//     quota makes the thread wait too, but with no competitor;
//   - steal time of the thread's CPU (/proc/stat), which is how a guest
//     sees the host scheduler run another vCPU or VM on its physical CPU.
//
// Each thread is sampled at most every SamplePeriod, on its own waits; the
// decision holds for a while after the last evidence (hysteresis), because
// blocking under contention hides most of the evidence that led to it: a
// thread that sleeps beside a busy co-runner is owed the CPU when it
// wakes (EEVDF runs a waking sleeper at once), so its run delay per
// scheduling-in falls to tens of µs though the co-runner still wants the
// CPU. So a shared verdict is released only by a window that can show the
// CPU free: one in which the thread was runnable (running or waiting to)
// most of the time, or in which its CPU was idle for a share of the time
// (/proc/stat), which it never is beside a busy co-runner. A window in
// which the thread mostly slept while its CPU stayed busy holds the
// verdict (judge).
//
// The zero value is ready to use.
type SchedSignal struct {
	threads perthread.Slots[threadSched]
	cg      throttleReader
	steal   stealReader
	team    teamScan
}

const (
	// SamplePeriod bounds the cost: a sample is three syscalls (a few µs).
	SamplePeriod = 4_000_000
	// SharedDelayFrac: run delay above this fraction of wall time, beyond
	// what throttling explains, is another task taking the CPU.
	SharedDelayFrac = 0.02
	// SharedDelayPerRun: and each scheduling-in waited this long on
	// average. Alone, a wake-up is scheduled in within a few µs on bare
	// metal, but tens of µs in a VM whose idle vCPU the host must wake
	// first, so a threshold near that calls a thread alone on its CPU
	// "shared" much of the time (docs/BENCHMARKS.md, "The contention
	// signal"); behind a CPU-bound co-runner a spinning thread waits
	// whole slices (ms) and a blocking one a tick (4 ms) on some of its
	// wake-ups. 150 µs sits well between the two.
	SharedDelayPerRun = 150_000
	// SharedHold, throttledHold: how long a verdict lasts without fresh
	// evidence. Throttling recurs once per quota period (100 ms by
	// default), so it is held longer.
	SharedHold = 50_000_000
	// stealShared: a smoothed steal fraction above this is a contended
	// physical CPU (a VM on a quiet host shows well under 1%).
	stealShared   = 0.05
	throttledHold = 250_000_000
	// awakeFree: a window in which the thread was runnable at least this
	// share of the time judges the CPU as it is; idleFree: a smoothed
	// idle fraction of its CPU at least this says nothing else wanted the
	// CPU while the thread slept. Alone, a thread that mostly sleeps
	// leaves its CPU idle about as long as it sleeps (more than half the
	// time, where the first does not apply); beside a busy co-runner the
	// CPU is never idle.
	awakeFree = 0.5
	idleFree  = 0.1
)

// threadSched is one thread's last sample. busy serialises samplers (the
// owner thread, normally alone).
type threadSched struct {
	busy atomic.Bool
	stat atomic.Pointer[procFile] // its schedstat

	last                 atomic.Int64 // time of the last sample, 0: none
	run, delay, runs     atomic.Int64 // schedstat at the last sample (run -1: not known)
	throttled            atomic.Int64 // cgroup throttled time at the last sample
	sharedTo, throttleTo atomic.Int64 // verdicts hold until these times

	// Totals over the windows judged, for the stats and Waited.
	sumDt, sumDelay, sumRuns, sumThrottled atomic.Int64
	sumStolen                              atomic.Int64 // the windows' steal fraction times their length

	// pending: under a CPU quota, the windows not judged yet (see judge);
	// only the sampler, which holds busy, touches it.
	pending schedWindow
}

func (g *SchedSignal) thread(tid int) *threadSched { return g.threads.Get(tid) }

// Contention returns the verdict for thread tid at now, sampling the
// kernel's counters if the last sample is older than SamplePeriod.
func (g *SchedSignal) Contention(tid int, now int64) Contention {
	t := g.thread(tid)
	if now-t.last.Load() >= SamplePeriod && t.busy.CompareAndSwap(false, true) {
		g.sample(t, tid, now)
		t.busy.Store(false)
	}
	if t.last.Load() == 0 {
		return ContentionUnknown
	}
	switch {
	case now < t.sharedTo.Load():
		return ContentionShared
	case now < t.throttleTo.Load():
		return ContentionThrottled
	}
	return ContentionFree
}

// Descheduled reports that thread tid lost its CPU while spinning: the next
// Contention call samples at once instead of waiting for the period.
func (g *SchedSignal) Descheduled(tid int) { g.thread(tid).last.Store(1) }

// Team reports whether other threads of the process spin on other
// contended CPUs while thread tid waits, an OpenMP team at its barrier
// (teamScan); known is false where the threads cannot be read.
func (g *SchedSignal) Team(tid int, now int64) (team, known bool) { return g.team.Team(tid, now) }

// Waited returns what thread tid's judged windows add up to (ns): the
// time it waited for its CPU, in the run queue or stolen by the host
// (its CPU's steal fraction over each window), and their length.
func (g *SchedSignal) Waited(tid int) (waited, span int64) {
	t := g.thread(tid)
	return t.sumDelay.Load() + t.sumStolen.Load(), t.sumDt.Load()
}

// QuotaPeriod returns the period (ns) of the CPU quota of the process's
// innermost cgroup that has one, as of the last sample; 0: none (or not
// sampled yet).
func (g *SchedSignal) QuotaPeriod() int64 { return g.cg.period.Load() }

func (g *SchedSignal) sample(t *threadSched, tid int, now int64) {
	f := t.stat.Load()
	if f == nil {
		pf := newProcFile("/proc/self/task/" + strconv.Itoa(tid) + "/schedstat")
		f = &pf
		t.stat.Store(f)
	}
	st, err := f.schedstat()
	if err != nil {
		return
	}
	g.sampleWith(t, now, st.Run, st.Delay, st.Runs)
}

// ObserveRunDelay takes the run delay thread tid's caller read at now, in
// place of a reading of its own, when a sample is due (Contention's rule):
// one reading of the thread's schedstat per decision. Its time on the CPU
// comes from the thread's CPU clock where tid is the calling thread (the
// C library reports from the thread itself), else it is not known.
func (g *SchedSignal) ObserveRunDelay(tid int, now int64, rd RunDelay) {
	t := g.thread(tid)
	if now-t.last.Load() >= SamplePeriod && t.busy.CompareAndSwap(false, true) {
		run := int64(-1)
		var ts unix.Timespec
		if tid == unix.Gettid() && unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) == nil {
			run = ts.Nano()
		}
		g.sampleWith(t, now, run, rd.Delay, rd.Runs)
		t.busy.Store(false)
	}
}

// sampleWith folds the thread's schedstat (time on the CPU, -1 if not
// known; delay, runs) at now, and the cgroups' throttled time, into its
// verdicts.
func (g *SchedSignal) sampleWith(t *threadSched, now, run, delay, runs int64) {
	thr := g.cg.throttled(now)
	if prev := t.last.Load(); prev > 1 {
		w := schedWindow{dt: now - prev, cpu: -1, delay: delay - t.delay.Load(), runs: runs - t.runs.Load(),
			throttled: thr - t.throttled.Load()}
		if last := t.run.Load(); run >= 0 && last >= 0 {
			w.cpu = run - last
		}
		w.steal, w.idle = g.steal.fractions(now)
		judge(t, now, w, g.cg.period.Load())
	}
	t.run.Store(run)
	t.delay.Store(delay)
	t.runs.Store(runs)
	t.throttled.Store(thr)
	t.last.Store(now)
}

// judge turns one sampling window into verdicts. Throttling shows as run
// delay too (the thread stays queued on its throttled group), so only the
// delay beyond the throttled time counts as a competitor. But cpu.stat
// counts a throttle's time when it ends, while the run delay grows all
// through it: a window inside a throttle would show delay nothing
// explains yet, and call a thread alone under a quota shared. So under a
// quota (period > 0) the windows are judged together
// when the throttled time moves, or once they span two periods without it
// (a throttle ends within its period and is counted at the next sample;
// one period would end mid-throttle when the thread runs its quota at once
// and then waits). Steal cannot tell a host quota from
// another vCPU: it counts as a competitor, which errs towards blocking,
// CUDA's better mode under contention.
//
// A window that does not show contention releases a shared verdict only
// if it could have shown it (schedWindow.inconclusive); otherwise it
// holds the verdict as fresh evidence would.
func judge(t *threadSched, now int64, w schedWindow, period int64) {
	t.sumDt.Add(w.dt)
	t.sumDelay.Add(w.delay)
	t.sumRuns.Add(w.runs)
	t.sumStolen.Add(int64(w.steal * float64(w.dt)))
	t.sumThrottled.Add(w.throttled)
	if w.throttled > 0 {
		t.throttleTo.Store(now + throttledHold)
	}
	if period > 0 {
		t.pending = t.pending.add(w)
		if w.throttled == 0 && t.pending.dt < 2*period {
			return
		}
		w, t.pending = t.pending, schedWindow{}
	}
	switch {
	case w.shared():
		t.sharedTo.Store(now + SharedHold)
	case t.sharedTo.Load() > now-w.dt && w.inconclusive():
		// Shared when the window began, and nothing in it says otherwise.
		t.sharedTo.Store(now + SharedHold)
	}
}

// schedWindow is what one thread's counters did between two samples (ns):
// its time on the CPU (cpu, -1: not known), its run delay, the times it
// was scheduled in, its cgroups' throttled time; and its CPU's smoothed
// steal and idle fractions at the end (idle -1: not known).
type schedWindow struct {
	dt, cpu, delay, runs, throttled int64
	steal, idle                     float64
}

// add returns w and the window after it as one (steal, idle: the later's).
func (w schedWindow) add(next schedWindow) schedWindow {
	cpu := w.cpu + next.cpu
	if w.cpu < 0 || next.cpu < 0 {
		cpu = -1
	}
	return schedWindow{dt: w.dt + next.dt, cpu: cpu, delay: w.delay + next.delay, runs: w.runs + next.runs,
		throttled: w.throttled + next.throttled, steal: next.steal, idle: next.idle}
}

// inconclusive: a window that shows no contention but could not have
// shown the contention a sleeping thread hides: the thread was runnable
// less than awakeFree of the time while its CPU was busy (idle under
// idleFree). Where either is not known, the window is taken as it is.
func (w schedWindow) inconclusive() bool {
	if w.cpu < 0 || w.idle < 0 || w.dt <= 0 {
		return false
	}
	return float64(w.cpu+w.delay) < awakeFree*float64(w.dt) && w.idle < idleFree
}

func (w schedWindow) shared() bool {
	excess := max(w.delay-w.throttled, 0)
	perRun := excess
	if w.runs > 0 {
		perRun = excess / w.runs
	}
	return float64(excess) > SharedDelayFrac*float64(w.dt) && perRun > SharedDelayPerRun ||
		w.steal > stealShared
}

// SchedTotals is what the signal saw over all the windows it judged.
type SchedTotals struct {
	Seconds          float64 `json:"seconds"`           // wall time covered
	RunDelaySeconds  float64 `json:"run_delay_seconds"` // runnable but not running
	Runs             int64   `json:"runs"`              // times scheduled in
	ThrottledSeconds float64 `json:"throttled_seconds"` // of which the cgroups' quota explains
	DelayPerRunUS    float64 `json:"delay_per_run_us"`  // mean wait per scheduling-in
}

// Totals sums the windows of every thread: what the verdicts were based on.
func (g *SchedSignal) Totals() SchedTotals {
	var dt, delay, runs, thr int64
	add := func(t *threadSched) {
		dt += t.sumDt.Load()
		delay += t.sumDelay.Load()
		runs += t.sumRuns.Load()
		thr += t.sumThrottled.Load()
	}
	g.threads.Each(add)
	st := SchedTotals{Seconds: float64(dt) / 1e9, RunDelaySeconds: float64(delay) / 1e9, Runs: runs, ThrottledSeconds: float64(thr) / 1e9}
	if runs > 0 {
		st.DelayPerRunUS = float64(delay/runs) / 1e3
	}
	return st
}
