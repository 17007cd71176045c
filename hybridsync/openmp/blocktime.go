package openmp

import (
	"strings"
	"sync/atomic"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/perthread"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// libomp's blocktime, adapted while the program runs. LLVM's OpenMP
// runtime (and Intel's build of it) has kmp_set_blocktime(ms), which sets
// how long the calling thread's team, and the teams it forks later, spin
// at a barrier before they sleep (KMP_BLOCKTIME, 200 ms by default). On
// CPUs shared with a busy neighbour a long spin burns the slice the
// team's other threads need (launch.go); alone it is what makes the next
// parallel region start at once. GNU libgomp has no such call: it reads
// GOMP_SPINCOUNT once, in its constructor, which only the launcher
// (hybridsync-run, Launch) reaches.
//
// So where the program runs libomp, the C library asks at each report of
// a thread (a call into Go it makes anyway, at a plan's end: hybridsync's engine.go)
// what that thread's blocktime should be, and sets it there, on the
// thread itself, between parallel regions (only there does the call set
// the teams the thread forks). The thread that waits on the device is the
// one that forks the regions in an OpenMP program (its master), so the
// signal the blocktime follows is that thread's: while it is in the
// contended regime (armChooser: entered at the first shared or throttled
// verdict, left after RegimeExit of free ones), blocktime 0, the
// runtime's sleep at once; otherwise the blocktime the thread had at its
// first look. The regime's hysteresis errs towards 0, whose cost alone
// is a fraction of what a long spin costs on shared CPUs
// (docs/libhybridsync.md, "OpenMP waits and hybridsync-run"); and a
// change is made at most once per blocktimeMinGap, the time one verdict
// of the contention signal lasts.
//
// The regime is entered on one verdict, which a single late
// scheduling-in gives (a few ms of a window): for the arm chooser that
// costs an exploration, for the blocktime a program whose team sleeps
// at every region's end. So where the contention signal keeps an account
// of the thread's waits for its CPU (SchedSignal.Waited), the blocktime
// goes to 0 only once the thread also waited blocktimeWaitShare of the
// time since its last look: the share that tells a busy neighbour from a
// program's own threads (docs/BENCHMARKS.md, "Several OpenMP threads",
// has the figures). A hint page's verdict
// needs no such check: the agent counts no thread of the program's own
// as a competitor.

// blocktimeMinGap: a thread's blocktime changes at most once in this
// long (sharedHold: a shared verdict of the signal lasts as long).
const blocktimeMinGap = signal.SharedHold

// blocktimeWaitShare, blocktimeWaitSpan: a thread in the contended
// regime gets blocktime 0 once it waited for its CPU this share of the
// judged time since its last look, taken over at least this long.
const (
	blocktimeWaitShare = 0.1
	blocktimeWaitSpan  = 100_000_000
)

// waitAccount is a contention source that adds up a thread's waits for
// its CPU (SchedSignal).
type waitAccount interface {
	Waited(tid int) (waited, span int64)
}

// libompDefaultBlocktime is libomp's own KMP_BLOCKTIME (ms): what a
// thread returns to once free when hybridsync-run, not the program, set
// its blocktime at start (the launcher's 0 was for CPUs contended then).
const libompDefaultBlocktime = 200

// BlocktimeSetting is BlocktimeLive's decision: whether the library
// adapts libomp's blocktime (Why: what keeps it off) and the blocktime a
// thread gets once free (FreeMS; -1: the thread's own at its first look).
type BlocktimeSetting struct {
	On     bool
	Why    string
	FreeMS int
}

// Blocktime is the live adaptation of libomp's blocktime over one
// engine, to which the threads report (the C library builds it beside
// its Engine, libhybridsync/lib/main.go).
type Blocktime struct {
	e       *hybridsync.Engine
	on      atomic.Bool
	freeMS  atomic.Int64
	why     atomic.Pointer[string]
	threads perthread.Slots[blocktimeThread]
	looked  atomic.Uint64 // threads that made their first look
	changes atomic.Uint64
	first   atomic.Int64 // the first thread that looked (0: none)
}

// blocktimeThread is one thread's blocktime: at its first look
// (original), as last set (current), and when it was last changed.
type blocktimeThread struct {
	seen              atomic.Bool
	original, current atomic.Int64
	changed           atomic.Int64
	firstAt           atomic.Int64 // when it made its first look
	waited, span      atomic.Int64 // waitAccount's at the end of the last share taken
	waitedMuch        atomic.Bool  // that share was blocktimeWaitShare or more
}

// NewBlocktime returns the live adaptation of libomp's blocktime over e,
// on or off as BlocktimeLive decided. It runs only in the default mode,
// whose threads report (the regime it follows is the arm chooser's).
func NewBlocktime(e *hybridsync.Engine, b BlocktimeSetting) *Blocktime {
	bt := &Blocktime{e: e}
	s := e.Syncer()
	on, why := b.On, b.Why
	bt.freeMS.Store(int64(b.FreeMS))
	if on && s.Mode() != hybridsync.ModeHybrid {
		on, why = false, hybridsync.EnvMode+"="+s.Mode().String()+": only the default mode's threads report to the engine"
	}
	bt.on.Store(on)
	bt.why.Store(&why)
	return bt
}

// Next returns the blocktime (ms) that thread tid should set in
// libomp now, at its report at now, or -1 to leave it as it is; cur is
// the thread's blocktime as its caller knows it (its first look, or what
// it last set), -1 where the caller cannot set it now (inside a parallel
// region). Call it after Report, in the same call from the thread.
func (b *Blocktime) Next(tid int, now int64, cur int) int {
	if cur < 0 || !b.on.Load() {
		return -1
	}
	t := b.threads.Get(tid)
	if !t.seen.Load() {
		t.original.Store(int64(cur))
		t.firstAt.Store(now)
		t.changed.Store(now - blocktimeMinGap)
		t.seen.Store(true)
		b.looked.Add(1)
		b.first.CompareAndSwap(0, int64(tid))
	}
	t.current.Store(int64(cur))
	want := t.original.Load()
	if f := b.freeMS.Load(); f >= 0 {
		// The launcher set the first look's value for CPUs it found
		// contended: it stands until the regime could have ended.
		want = f
		if now-t.firstAt.Load() < hybridsync.RegimeExit {
			want = int64(cur)
		}
	}
	much := b.waitedMuch(t, tid) // at every look, so that a share covers only the time since the last
	want = Decide(b.e.Contended(tid) && (cur == 0 || much), Waits{Spin: -1, BlocktimeMS: want}).BlocktimeMS
	if want == int64(cur) || now-t.changed.Load() < blocktimeMinGap {
		return -1
	}
	t.current.Store(want)
	t.changed.Store(now)
	b.changes.Add(1)
	return int(want)
}

// waitedMuch tells whether thread tid waited for its CPU
// blocktimeWaitShare or more of the time since the last share was taken,
// once blocktimeWaitSpan of it was judged (until then, the last share's
// answer); true where the contention source keeps no account of waits.
func (b *Blocktime) waitedMuch(t *blocktimeThread, tid int) bool {
	acc, ok := b.e.Syncer().Contention().(waitAccount)
	if !ok {
		return true
	}
	waited, span := acc.Waited(tid)
	if span-t.span.Load() >= blocktimeWaitSpan {
		share := float64(waited-t.waited.Load()) / float64(span-t.span.Load())
		t.waited.Store(waited)
		t.span.Store(span)
		t.waitedMuch.Store(share >= blocktimeWaitShare)
	}
	return t.waitedMuch.Load()
}

// BlocktimeStats is the live adaptation of libomp's blocktime, for the
// stats' openmp object.
type BlocktimeStats struct {
	// Active: the library adapts the blocktime (libomp's
	// kmp_set_blocktime found, the setting not fixed by the user, the
	// default mode); Why: what keeps it off.
	Active bool   `json:"active"`
	Why    string `json:"why,omitempty"`
	// Threads: the threads that made their first look (read their
	// blocktime at a report, between parallel regions).
	Threads uint64 `json:"threads"`
	// OriginalMS, CurrentMS: the first of them's blocktime at its first
	// look, and as last set (absent before any look).
	OriginalMS *int64 `json:"original_ms,omitempty"`
	CurrentMS  *int64 `json:"current_ms,omitempty"`
	// Changes: the blocktimes set, all threads together.
	Changes uint64 `json:"changes"`
}

// BlocktimeStats returns what the live adaptation did.
func (b *Blocktime) Stats() BlocktimeStats {
	st := BlocktimeStats{Active: b.on.Load(), Threads: b.looked.Load(), Changes: b.changes.Load()}
	if w := b.why.Load(); w != nil && !st.Active {
		st.Why = *w
	}
	if st.Why == "" && !st.Active {
		st.Why = "not configured"
	}
	if tid := b.first.Load(); tid != 0 {
		t := b.threads.Get(int(tid))
		o, c := t.original.Load(), t.current.Load()
		st.OriginalMS, st.CurrentMS = &o, &c
	}
	return st
}

// BlocktimeLive decides whether the library may adapt libomp's blocktime
// while the program runs: lookup reads the environment (ok false: unset),
// callable says kmp_set_blocktime and kmp_get_blocktime are there to call
// (dlsym(RTLD_DEFAULT)), runtime is the OpenMP runtime the program runs
// (the stats' name: libgomp, libomp, libiomp5, none, joined by "+"). A
// setting the user fixed is left alone: OMP_WAIT_POLICY, or a
// KMP_BLOCKTIME that hybridsync-run did not set (HYBRIDSYNC_RUN_SET names
// what it set); so is every setting under HYBRIDSYNC_OPENMP=default. One
// that hybridsync-run set is adapted, and gives way to libomp's default
// once the CPUs are free.
func BlocktimeLive(lookup func(string) (string, bool), openmp string, callable bool, runtime string) BlocktimeSetting {
	off := func(why string) BlocktimeSetting { return BlocktimeSetting{Why: why, FreeMS: -1} }
	if !callable {
		if strings.Contains(runtime, "libgomp") {
			return off("libgomp: no call changes its spin (under hybridsync-run the library follows it: the stats' spin_live)")
		}
		return off("no OpenMP runtime with kmp_set_blocktime")
	}
	if _, ok := lookup("OMP_WAIT_POLICY"); ok {
		return off("OMP_WAIT_POLICY set by the user")
	}
	free := -1
	if v, ok := lookup("KMP_BLOCKTIME"); ok {
		if !SetByRun(lookup, "KMP_BLOCKTIME", v) {
			return off("KMP_BLOCKTIME set by the user")
		}
		free = libompDefaultBlocktime
	}
	if openmp == hybridsync.OpenMPDefault {
		return off(hybridsync.EnvOpenMP + "=" + hybridsync.OpenMPDefault)
	}
	return BlocktimeSetting{On: true, FreeMS: free}
}

// SetByRun says whether hybridsync-run set the variable k to v, its
// value now (lookup reads the environment).
func SetByRun(lookup func(string) (string, bool), k, v string) bool {
	run, ok := lookup(hybridsync.EnvRunSet)
	if !ok {
		return false
	}
	for _, kv := range strings.Fields(run) {
		if rk, rv, ok := strings.Cut(kv, "="); ok && rk == k && rv == v {
			return true
		}
	}
	return false
}
