package mitigate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/runstate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// Options configures a Mitigator.
type Options struct {
	Slice time.Duration
	Log   zerolog.Logger
	// Sched is System unless a test plays another kernel.
	Sched Sched
	// Failed is called for every thread whose slice could not be read,
	// set or restored (the agent counts them); nil: only logged. A
	// thread that exited meanwhile is no failure.
	Failed func()
	// StateDir, when set, is where the mitigator keeps its journal and
	// its process locks (agent/runstate): each slice is recorded before
	// it is set, and a process another live agent mitigates is left to
	// it. Restoring what agents that died left there is Recover's, which
	// every agent's start runs, mitigating or not.
	StateDir string
	// Contention, when set, gates the slice on it: a watched thread has
	// the slice only while another process's task competes for its CPU
	// (contention.Tracker's verdict, which the caller feeds with the
	// watched threads' switch events), and its own slice back once it
	// has been free for contention.For; Run does the flips. A helper
	// has the slice while any thread of its target has. Alone the slice
	// changes no wake-up worth having and makes the program's own
	// threads preempt each other. nil: every watched thread has the
	// slice for as long as it is watched.
	Contention *contention.Tracker
}

// GateEvery is how often Run looks for threads whose contention changed
// (a thread turning shared is acted on at once).
const GateEvery = 100 * time.Millisecond

// Mitigator sets the slice of the threads (and helpers) of the targets it
// is given (gated: while they are contended) and restores them. It is
// safe for concurrent use.
type Mitigator struct {
	slice  uint64 // ns
	base   uint64 // the kernel's default slice, as getattr reports it
	sched  Sched
	log    zerolog.Logger
	failed func()
	cont   *contention.Tracker // nil: not gated
	now    func() uint64       // CLOCK_MONOTONIC, ns (tests play it)
	// startOf is a thread's start time (runstate.StartTime; tests of
	// made-up threads play it).
	startOf func(tid int) (uint64, error)

	mu      sync.Mutex
	threads map[int]*thread   // by tid; guarded by mu
	targets map[string]target // by target key; guarded by mu
	stopped bool              // guarded by mu
	want    map[int]bool      // gate's scratch; guarded by mu
	// With a StateDir: the journal, and the process locks with the
	// number of threads (and claims) that hold each, by tgid.
	stateDir string
	journal  *runstate.Journal
	procs    map[int]*procLock
	refused  map[int]bool // processes said to be another agent's
}

type procLock struct {
	lock *runstate.Lock
	refs int
}

// target is what one target lists: its threads, and its helpers (whose
// slice follows its threads' contention).
type target struct{ threads, helpers []int }

type thread struct {
	refs    int  // targets that list it (a pid and a cgroup may share it)
	applied bool // it has the slice now
	// restore is the sched_runtime to put back; 0 returns the thread to
	// the kernel's default slice (and to later changes of it).
	restore uint64
	tgid    int            // whose process lock it holds (0: none)
	rec     runstate.Slice // its journal record (with a StateDir)
	pinned  bool           // the slice whatever the contention (Inherit)
	tracked bool           // added to the contention tracker
	// start is its start time when it was armed: a slice is set or put
	// back only while the tid still names that thread, not one that
	// took the tid after it exited.
	start uint64
	// skip: left alone for good (not fair-class, its process another
	// agent's, or a set or restore the kernel refused).
	skip    bool
	flipped uint64 // when the slice was last set or restored (0: never)
}

// New checks that the kernel honours custom slices (an error wrapping
// ErrUnsupported if not) and returns a Mitigator that has changed nothing
// yet.
func New(o Options) (*Mitigator, error) {
	if o.Sched == nil {
		o.Sched = System
	}
	if o.Slice < MinSlice || o.Slice > MaxSlice {
		return nil, fmt.Errorf("slice %v outside %v..%v", o.Slice, MinSlice, MaxSlice)
	}
	slice := uint64(o.Slice.Nanoseconds())
	base, err := Check(o.Sched, slice)
	if err != nil {
		return nil, err
	}
	if o.Failed == nil {
		o.Failed = func() {}
	}
	m := &Mitigator{slice: slice, base: base, sched: o.Sched, log: o.Log, failed: o.Failed,
		cont: o.Contention, now: monoNow, startOf: runstate.StartTime, want: map[int]bool{},
		threads: map[int]*thread{}, targets: map[string]target{},
		stateDir: o.StateDir, procs: map[int]*procLock{}, refused: map[int]bool{}}
	if o.StateDir != "" {
		if m.journal, err = runstate.OpenJournal(o.StateDir, slice); err != nil {
			return nil, fmt.Errorf("recording slices: %w", err)
		}
	}
	return m, nil
}

// Claim makes this mitigator the owner of process pid's slices before
// any is set (the agent claims its --pid targets at start): a
// *runstate.HeldError when another live agent owns it. Without a
// StateDir it does nothing.
func (m *Mitigator) Claim(pid int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stateDir == "" {
		return nil
	}
	return m.lockProcess(pid)
}

// lockProcess takes (or counts one more holder of) the lock of process
// tgid. Must be called with mu held.
func (m *Mitigator) lockProcess(tgid int) error {
	if p := m.procs[tgid]; p != nil {
		p.refs++
		return nil
	}
	name, err := runstate.ProcessLockName(tgid)
	if err != nil {
		return err
	}
	l, err := runstate.Acquire(m.stateDir, name, fmt.Sprintf("process %d", tgid))
	if err != nil {
		return err
	}
	m.procs[tgid] = &procLock{lock: l, refs: 1}
	return nil
}

// unlockProcess drops one holder of the lock of process tgid. Must be
// called with mu held.
func (m *Mitigator) unlockProcess(tgid int) {
	p := m.procs[tgid]
	if p == nil {
		return
	}
	if p.refs--; p.refs <= 0 {
		p.lock.Release()
		delete(m.procs, tgid)
	}
}

// Apply follows one change of the targets: threads that appeared are
// armed (gated: the slice once they are contended; otherwise it is set
// at once), threads that left (or whose target went) get theirs back. A
// thread that exited has nothing to restore.
func (m *Mitigator) Apply(ev targets.Event) { m.apply(ev, false) }

// apply is Apply; pinned gives the target's threads the slice at once
// and keeps it whatever their contention (Inherit).
func (m *Mitigator) apply(ev targets.Event, pinned bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	key := ev.Target.Key()
	old := m.targets[key]
	var cur target
	if ev.Kind == targets.Added {
		for _, th := range ev.Target.Threads {
			cur.threads = append(cur.threads, th.TID)
		}
		// A helper delivers the threads' wake-ups (a domain's emulator
		// thread): without the slice it waits for the co-runner's.
		cur.helpers = ev.Target.Helpers
		m.targets[key] = cur
	} else {
		delete(m.targets, key)
	}
	first := len(old.threads)+len(old.helpers) == 0
	vcpu := ev.Target.Kind == targets.KindDomain
	added := 0
	for _, tid := range minus(cur.threads, old.threads) {
		if m.ref(tid, pinned, vcpu, true) {
			added++
		}
	}
	for _, tid := range minus(cur.helpers, old.helpers) {
		if m.ref(tid, pinned, false, false) {
			added++
		}
	}
	for _, tid := range minus(old.threads, cur.threads) {
		m.unref(tid)
	}
	for _, tid := range minus(old.helpers, cur.helpers) {
		m.unref(tid)
	}
	if added > 0 {
		// The target's first threads are news; threads that come later
		// (a pool that grows and shrinks) would be a line every re-scan.
		lvl := zerolog.DebugLevel
		if first {
			lvl = zerolog.InfoLevel
		}
		msg := "mitigation: short EEVDF slice set"
		if m.gated(pinned) {
			msg = "mitigation: short EEVDF slice armed, set while another process competes for the thread's CPU"
		}
		m.log.WithLevel(lvl).Str("target", key).Int("threads", added).Str("slice", time.Duration(m.slice).String()).Msg(msg)
	}
}

// gated reports whether a thread's slice follows its contention.
func (m *Mitigator) gated(pinned bool) bool { return m.cont != nil && !pinned }

// Run gives the watched threads the slice while they are contended and
// their own back once they are free (Options.Contention), until ctx
// ends: at once when a thread turns shared, else every GateEvery. Each
// thread flips at most once per contention.For. Without a Contention it
// returns at once.
func (m *Mitigator) Run(ctx context.Context) {
	if m.cont == nil {
		return
	}
	t := time.NewTicker(GateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.cont.SharedNow():
		case <-t.C:
		}
		m.gate(m.now())
	}
}

// gate flips every armed thread whose contention at now differs from
// whether it has the slice, unless it flipped within contention.For.
func (m *Mitigator) gate(now uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || m.cont == nil {
		return
	}
	want := m.want
	clear(want)
	for _, tg := range m.targets {
		any := false
		for _, tid := range tg.threads {
			if m.cont.Shared(tid, now) {
				want[tid], any = true, true
			}
		}
		if any {
			for _, tid := range tg.helpers {
				want[tid] = true
			}
		}
	}
	for tid, t := range m.threads {
		if t.pinned || t.skip || want[tid] == t.applied {
			continue
		}
		if t.flipped != 0 && now-min(t.flipped, now) < contention.For {
			continue
		}
		if want[tid] {
			if m.set(tid, t, now) {
				m.log.Debug().Int("tid", tid).Msg("mitigation: contended, short slice set")
			}
			continue
		}
		if err := m.restore(tid, t); err != nil {
			// Kept as applied: Stop tries again, and the journal keeps
			// it until then.
			t.skip = true
			m.log.Error().Err(err).Msg("mitigation")
			continue
		}
		t.applied, t.flipped = false, now
		m.log.Debug().Int("tid", tid).Msg("mitigation: free, slice restored")
	}
}

// Stop restores every thread still mitigated; later Apply calls change
// nothing. Threads that exited are skipped; the error joins the others.
func (m *Mitigator) Stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	var errs []error
	n := 0
	for tid, t := range m.threads {
		if t.applied {
			if err := m.restore(tid, t); err != nil {
				errs = append(errs, err)
			} else {
				n++
			}
		}
	}
	for tid, t := range m.threads {
		if t.tracked {
			m.cont.Remove(tid)
		}
	}
	clear(m.threads)
	clear(m.targets)
	// A journal whose slices could not all be put back stays for the
	// next agent to try.
	m.journal.Close(len(errs) == 0)
	for _, p := range m.procs {
		p.lock.Release()
	}
	clear(m.procs)
	if n > 0 {
		m.log.Info().Int("threads", n).Msg("mitigation: slices restored")
	}
	return errors.Join(errs...)
}

// Mitigated reports whether the thread has the slice from this Mitigator.
func (m *Mitigator) Mitigated(tid int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[tid]
	return t != nil && t.applied
}

// Slice is the slice tid has from this Mitigator now, 0 if none (gated,
// none while it is free): what the hint publisher tells the thread's
// reader (hintpage.Slot.MitigationNs), so that the library prices
// blocking with it.
func (m *Mitigator) Slice(tid int) time.Duration {
	if !m.Mitigated(tid) {
		return 0
	}
	return time.Duration(m.slice)
}

// ref counts one more target listing tid; the first time it arms it
// (tracked: its contention is followed, not a helper's) and, ungated
// (or where it already has the slice, inherited from a thread that had
// it), sets the slice. It reports whether the thread was armed. Must be
// called with mu held.
func (m *Mitigator) ref(tid int, pinned, vcpu, tracked bool) bool {
	if t := m.threads[tid]; t != nil {
		t.refs++
		return false
	}
	t := &thread{refs: 1, pinned: pinned}
	m.threads[tid] = t
	if m.stateDir != "" {
		rec, err := m.own(tid)
		if err != nil {
			t.skip = true
			return false
		}
		t.rec, t.tgid, t.start = rec, rec.TGID, rec.Start
	} else if st, err := m.startOf(tid); err == nil {
		t.start = st
	} else {
		t.skip = true // exited: nothing to set
		return false
	}
	now := m.now()
	if !m.gated(pinned) {
		return m.set(tid, t, now)
	}
	if tracked {
		m.cont.Add(tid, vcpu, now)
		t.tracked = true
	}
	if a, err := m.sched.Get(tid); err == nil && a.Runtime == m.slice {
		// Made by a thread that had the slice (custom slices survive
		// fork and clone): it is this mitigator's to put back, and the
		// gate takes it from there.
		m.set(tid, t, now)
	}
	return true
}

func (m *Mitigator) unref(tid int) {
	t := m.threads[tid]
	if t == nil {
		return
	}
	if t.refs--; t.refs > 0 {
		return
	}
	delete(m.threads, tid)
	if t.applied {
		if err := m.restore(tid, t); err != nil {
			m.log.Error().Err(err).Msg("mitigation")
		}
	}
	if t.tracked {
		m.cont.Remove(tid)
	}
	if t.tgid > 0 {
		m.unlockProcess(t.tgid)
	}
}

// set sets the slice on tid, recorded first in the journal (with a
// StateDir), and reports whether it did. A thread that is not
// fair-class, or whose set the kernel refused, is left alone for good.
// Must be called with mu held.
func (m *Mitigator) set(tid int, t *thread, now uint64) bool {
	a, err := m.sched.Get(tid)
	if err != nil {
		if !gone(err) {
			m.fail(err, tid, "mitigation: reading scheduling attributes")
		}
		t.skip = true
		return false
	}
	if !fair(a.Policy) {
		m.log.Info().Int("tid", tid).Uint32("policy", a.Policy).Msg("mitigation: not a SCHED_OTHER or SCHED_BATCH thread, left alone")
		t.skip = true
		return false
	}
	// A thread that already has exactly our slice most likely inherited
	// it (custom slices survive fork and clone) from a thread mitigated
	// here: it gets the default back, not our slice.
	restore := a.Runtime
	if restore == m.base || restore == m.slice {
		restore = 0
	}
	if m.journal != nil {
		// Recorded before it is set: a crash between the two leaves a
		// record of a slice not set, which recovery skips.
		rec := t.rec
		rec.Restore = restore
		if err := m.journal.Put(rec); err != nil {
			m.fail(err, tid, "mitigation: slice not set, it could not be recorded for a restart")
			t.skip = true
			return false
		}
	}
	err = m.same(tid, t)
	if err == nil {
		err = m.sched.Set(tid, withRuntime(a, m.slice))
	}
	if err != nil {
		if !gone(err) {
			m.fail(err, tid, "mitigation: setting the slice")
		}
		if m.journal != nil {
			_ = m.journal.Delete(tid)
		}
		t.skip = true
		return false
	}
	t.applied, t.restore, t.flipped = true, restore, now
	return true
}

// own takes the lock of tid's process and describes tid for the
// journal; it fails (logged) for a thread that exited, or whose process
// another live agent mitigates (logged once per process, counted).
func (m *Mitigator) own(tid int) (runstate.Slice, error) {
	rec := runstate.Slice{TID: tid}
	st, err := procstat.Status(tid)
	if err == nil {
		rec.TGID = int(st.TGID)
		if rec.Start, err = runstate.StartTime(tid); err == nil {
			rec.TGIDStart, err = runstate.StartTime(rec.TGID)
		}
	}
	if err != nil {
		return rec, err // exited: nothing to set
	}
	if err := m.lockProcess(rec.TGID); err != nil {
		var held *runstate.HeldError
		if errors.As(err, &held) {
			if !m.refused[rec.TGID] {
				m.refused[rec.TGID] = true
				m.log.Error().Err(err).Int("tid", tid).Msg("mitigation: left to the agent that owns it")
			}
			m.failed()
		} else {
			m.fail(err, tid, "mitigation: locking the thread's process")
		}
		return rec, err
	}
	return rec, nil
}

// restore puts back the slice of tid, keeping the policy and nice value
// it has now (the program may have changed them meanwhile); a tid that
// names another thread now has nothing of ours to put back.
func (m *Mitigator) restore(tid int, t *thread) error {
	a, err := m.sched.Get(tid)
	if err == nil {
		err = m.same(tid, t)
	}
	if err == nil && fair(a.Policy) {
		err = m.sched.Set(tid, withRuntime(a, t.restore))
	}
	if err != nil && !gone(err) {
		m.failed()
		return fmt.Errorf("restoring the slice of thread %d: %w", tid, err)
	}
	if m.journal != nil {
		if err := m.journal.Delete(tid); err != nil {
			m.log.Warn().Err(err).Int("tid", tid).Msg("mitigation: restored slice still in the journal")
		}
	}
	return nil
}

// same returns nil while tid names the thread t was armed for, and an
// error wrapping ESRCH (gone, not a failure) once it exited, whether or
// not another thread took its tid since. It is asked just before each
// sched_setattr; a tid reused between the two would need the thread to
// exit and the kernel to cycle through every pid in that time.
func (m *Mitigator) same(tid int, t *thread) error {
	st, err := m.startOf(tid)
	if err == nil && st != t.start {
		m.log.Debug().Int("tid", tid).Msg("mitigation: thread id reused by another thread, left alone")
		err = unix.ESRCH
	}
	if err != nil {
		return fmt.Errorf("thread %d: %w", tid, unix.ESRCH)
	}
	return nil
}

// fail logs and counts a thread left without the slice.
func (m *Mitigator) fail(err error, tid int, msg string) {
	m.log.Error().Err(err).Int("tid", tid).Msg(msg)
	m.failed()
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// gone: the thread exited, which is how targets usually go.
func gone(err error) bool { return errors.Is(err, unix.ESRCH) }

// minus returns the elements of a not in b.
func minus(a, b []int) []int {
	if len(b) == 0 {
		return a
	}
	in := make(map[int]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	var out []int
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}
