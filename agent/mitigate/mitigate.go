package mitigate

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

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
}

// Mitigator sets the slice of the threads (and helpers) of the targets it
// is given and restores them. It is safe for concurrent use.
type Mitigator struct {
	slice  uint64 // ns
	base   uint64 // the kernel's default slice, as getattr reports it
	sched  Sched
	log    zerolog.Logger
	failed func()

	mu      sync.Mutex
	threads map[int]*thread  // by tid; guarded by mu
	targets map[string][]int // tids by target key; guarded by mu
	stopped bool             // guarded by mu
}

type thread struct {
	refs    int  // targets that list it (a pid and a cgroup may share it)
	applied bool // false: left alone (not fair-class, or the set failed)
	// restore is the sched_runtime to put back; 0 returns the thread to
	// the kernel's default slice (and to later changes of it).
	restore uint64
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
	return &Mitigator{slice: slice, base: base, sched: o.Sched, log: o.Log, failed: o.Failed,
		threads: map[int]*thread{}, targets: map[string][]int{}}, nil
}

// Apply follows one change of the targets: threads that appeared get the
// slice, threads that left (or whose target went) get theirs back. A
// thread that exited has nothing to restore.
func (m *Mitigator) Apply(ev targets.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	key := ev.Target.Key()
	old := m.targets[key]
	var cur []int
	if ev.Kind == targets.Added {
		for _, th := range ev.Target.Threads {
			cur = append(cur, th.TID)
		}
		// A helper delivers the threads' wake-ups (a domain's emulator
		// thread): without the slice it waits for the co-runner's.
		cur = append(cur, ev.Target.Helpers...)
		m.targets[key] = cur
	} else {
		delete(m.targets, key)
	}
	first := len(old) == 0
	added := 0
	for _, tid := range minus(cur, old) {
		if m.ref(tid) {
			added++
		}
	}
	for _, tid := range minus(old, cur) {
		m.unref(tid)
	}
	if added > 0 {
		// The target's first threads are news; threads that come later
		// (a pool that grows and shrinks) would be a line every re-scan.
		lvl := zerolog.DebugLevel
		if first {
			lvl = zerolog.InfoLevel
		}
		m.log.WithLevel(lvl).Str("target", key).Int("threads", added).Str("slice", time.Duration(m.slice).String()).Msg("mitigation: short EEVDF slice set")
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
			if err := m.restore(tid, t.restore); err != nil {
				errs = append(errs, err)
			} else {
				n++
			}
		}
	}
	clear(m.threads)
	clear(m.targets)
	m.log.Info().Int("threads", n).Msg("mitigation: slices restored")
	return errors.Join(errs...)
}

// Mitigated reports whether the thread has the slice from this Mitigator.
func (m *Mitigator) Mitigated(tid int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[tid]
	return t != nil && t.applied
}

// Slice is the slice tid has from this Mitigator, 0 if none: what the
// hint publisher tells the thread's reader (hintpage.Slot.MitigationNs),
// so that the library prices blocking with it.
func (m *Mitigator) Slice(tid int) time.Duration {
	if !m.Mitigated(tid) {
		return 0
	}
	return time.Duration(m.slice)
}

// ref counts one more target listing tid, setting its slice the first
// time; it reports whether it did.
func (m *Mitigator) ref(tid int) bool {
	if t := m.threads[tid]; t != nil {
		t.refs++
		return false
	}
	t := &thread{refs: 1}
	m.threads[tid] = t
	t.restore, t.applied = m.apply(tid)
	return t.applied
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
		if err := m.restore(tid, t.restore); err != nil {
			m.log.Error().Err(err).Msg("mitigation")
		}
	}
}

// apply sets the slice on tid and returns the sched_runtime to restore.
func (m *Mitigator) apply(tid int) (restore uint64, ok bool) {
	a, err := m.sched.Get(tid)
	if err != nil {
		if !gone(err) {
			m.fail(err, tid, "mitigation: reading scheduling attributes")
		}
		return 0, false
	}
	if !fair(a.Policy) {
		m.log.Info().Int("tid", tid).Uint32("policy", a.Policy).Msg("mitigation: not a SCHED_OTHER or SCHED_BATCH thread, left alone")
		return 0, false
	}
	// A thread that already has exactly our slice most likely inherited
	// it (custom slices survive fork and clone) from a thread mitigated
	// here, or from an agent killed with SIGKILL: it gets the default
	// back, not our slice.
	restore = a.Runtime
	if restore == m.base || restore == m.slice {
		restore = 0
	}
	if err := m.sched.Set(tid, withRuntime(a, m.slice)); err != nil {
		if !gone(err) {
			m.fail(err, tid, "mitigation: setting the slice")
		}
		return 0, false
	}
	return restore, true
}

// restore puts back the slice of tid, keeping the policy and nice value
// it has now (the program may have changed them meanwhile).
func (m *Mitigator) restore(tid int, runtime uint64) error {
	a, err := m.sched.Get(tid)
	if err == nil && fair(a.Policy) {
		err = m.sched.Set(tid, withRuntime(a, runtime))
	}
	if err != nil && !gone(err) {
		m.failed()
		return fmt.Errorf("restoring the slice of thread %d: %w", tid, err)
	}
	return nil
}

// fail logs and counts a thread left without the slice.
func (m *Mitigator) fail(err error, tid int, msg string) {
	m.log.Error().Err(err).Int("tid", tid).Msg(msg)
	m.failed()
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
