package monitor

import (
	"cmp"
	"errors"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// A target that goes (its process exits, its cgroup is removed, its domain
// stops) and a thread that leaves a target that stays stay in snapshots,
// marked gone, with their measurements up to then, for one Window after
// they went: `agent --once` then reports a target that exited during the
// measurement, and a client polling /api/v1/snapshot more often than the
// window sees every target's last numbers once. The metrics leave them out
// (model.Snapshot.Live).

// MaxGoneThreads bounds the threads that left a target kept in its
// snapshot, the most recent: a cgroup whose threads come and go by the
// thousand (a build) would otherwise fill every snapshot for a window.
const MaxGoneThreads = 64

// span is the window a thread's rates are over, and how much of it was
// traced.
type span struct{ window, traced time.Duration }

func (s span) max(o span) span {
	if o.window > s.window {
		return o
	}
	return s
}

// gone is a measured target or thread kept after it went.
type gone[T any] struct {
	m    T
	atNs uint64 // CLOCK_MONOTONIC when it went
	span span
}

// look is what measuring targets needs at one moment.
type look struct {
	now       uint64
	cur       map[uint32]*model.Counters // counters of the live threads read now
	corunners map[uint32][]bpfload.Corunner
	domains   map[uint32]string
}

// lookAt reads what measuring needs besides cur. Must be called with mu
// held.
func (m *Monitor) lookAt(now uint64, cur map[uint32]*model.Counters) *look {
	corunners, err := m.probe.Corunners()
	if err != nil {
		m.log.Warn().Err(err).Msg("reading corunners")
	}
	return &look{now: now, cur: cur, corunners: corunners, domains: m.domainTGIDs()}
}

// read reads one watched thread's counters now and keeps them as its last.
// A thread found to have exited gets its final counters (exited) and nil
// is returned, as for one that cannot be read. Must be called with mu
// held.
func (m *Monitor) read(tid uint32, w *watch, now uint64) *model.Counters {
	if w.goneNs != 0 {
		return nil
	}
	k, err := procstat.Read(int(tid))
	if isExited(err) {
		m.exited(tid, w, now)
		return nil
	}
	if err != nil {
		m.log.Debug().Err(err).Uint32("tid", tid).Msg("reading kernel counters")
		return nil
	}
	var raw bpf.SchedThreadStats
	if err := m.probe.Stats(tid, &raw); err != nil {
		m.log.Debug().Err(err).Uint32("tid", tid).Msg("reading counters")
		return nil
	}
	c := &model.Counters{Kernel: k, Traced: tracedOf(&raw)}
	w.last, w.lastNs = c, now
	return c
}

// isExited tells a thread that is no longer there (reaped: its /proc
// directory is gone, or it went while being read) from other read errors.
func isExited(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// exited records that a watched thread has exited, found at now, with
// its final counters and when it went: the kernel's counters go with it,
// so they are the last read advanced by what the programs, which keep its
// entry until it is unwatched, saw since (model.Exited); it went at its
// last switch-out if they saw it, else it is taken to have gone now. Must
// be called with mu held.
func (m *Monitor) exited(tid uint32, w *watch, now uint64) {
	final, at := *w.last, uint64(0)
	var raw bpf.SchedThreadStats
	if err := m.probe.Stats(tid, &raw); err == nil {
		tr := tracedOf(&raw)
		final, at = model.Exited(w.last, w.lastNs, &tr)
	} else {
		m.log.Debug().Err(err).Uint32("tid", tid).Msg("reading counters of an exited thread")
	}
	w.final, w.goneNs = &final, cmp.Or(min(at, now), now)
	m.log.Debug().Uint32("tid", tid).Msg("thread exited")
}

// readThreads reads the counters of the given threads now. Must be called
// with mu held.
func (m *Monitor) readThreads(ths []targets.Thread, now uint64) map[uint32]*model.Counters {
	out := make(map[uint32]*model.Counters, len(ths))
	for _, th := range ths {
		tid := uint32(th.TID)
		if w := m.watched[tid]; w != nil {
			if c := m.read(tid, w, now); c != nil {
				out[tid] = c
			}
		}
	}
	return out
}

// remove moves a target that went at atNs into m.gone, measured as it was
// then with the threads that left it before, and stops watching its
// threads. Must be called with mu held, with v holding its threads'
// counters.
func (m *Monitor) remove(key string, t targets.Target, v *look, atNs uint64) {
	mt, sp := m.measure(key, t, v)
	at := wallOf(atNs)
	for i := range mt.Threads {
		markGone(&mt.Threads[i], at)
	}
	for _, g := range m.left[key] {
		mt.Threads = append(mt.Threads, g.m)
		sp = sp.max(g.span)
	}
	mt.Gone, mt.GoneAt = true, at
	m.gone[key] = gone[model.Target]{m: mt, atNs: atNs, span: sp}
	delete(m.left, key)
	delete(m.targets, key)
	m.timeline.setTarget(key, t.Name, nil)
	for _, th := range t.Threads {
		m.unref(uint32(th.TID))
	}
	m.log.Info().Str("target", key).Msg("target gone")
}

// leave keeps the threads of old that the target's new description lacks
// (they exited or moved out), measured now, in m.left. Must be called with
// mu held, before they are unwatched.
func (m *Monitor) leave(key string, old, cur targets.Target, now uint64) {
	var left []targets.Thread
	for _, th := range old.Threads {
		if !slices.ContainsFunc(cur.Threads, func(c targets.Thread) bool { return c.TID == th.TID }) {
			left = append(left, th)
		}
	}
	if len(left) == 0 {
		return
	}
	v := m.lookAt(now, m.readThreads(left, now))
	self := m.targetTGIDs(old)
	q := model.Quota{PeriodUS: old.PeriodUS, QuotaUS: old.QuotaUS}
	for _, th := range left {
		w := m.watched[uint32(th.TID)]
		if w == nil {
			continue
		}
		mth, sp, ok := m.measureThread(th, w, q, v)
		if !ok {
			continue
		}
		cs := m.corun.threadCorunners(v.corunners[uint32(th.TID)], v.domains, self)
		mth.Corunners = cs[:min(len(cs), MaxCorunnerKeys)]
		at := cmp.Or(w.goneNs, now) // exited, or moved out now
		markGone(&mth, wallOf(at))
		m.left[key] = append(m.left[key], gone[model.Thread]{m: mth, atNs: at, span: sp})
	}
	if n := len(m.left[key]); n > MaxGoneThreads {
		m.left[key] = slices.Delete(m.left[key], 0, n-MaxGoneThreads)
	}
}

// back forgets what went of a target, or of its threads, that is
// watched again: a name stays unique within a kind in a snapshot. Must be
// called with mu held.
func (m *Monitor) back(key string, t targets.Target) {
	delete(m.gone, key)
	m.left[key] = slices.DeleteFunc(m.left[key], func(g gone[model.Thread]) bool {
		return slices.ContainsFunc(t.Threads, func(th targets.Thread) bool { return th.TID == g.m.TID })
	})
	if len(m.left[key]) == 0 {
		delete(m.left, key)
	}
}

// reapProcesses removes the pid targets whose process has gone: its main
// thread (tid = pid), which lives as long as the process, even as a
// zombie, has exited. Their source would tell only at its next rescan,
// after a one-off snapshot may have been taken. Must be called with mu
// held, with v from the read that found it.
func (m *Monitor) reapProcesses(v *look) {
	for key, t := range m.targets {
		if t.Kind != targets.KindPID {
			continue
		}
		pid, err := strconv.ParseUint(t.Name, 10, 32)
		if err != nil {
			continue
		}
		if w := m.watched[uint32(pid)]; w != nil && w.goneNs != 0 {
			m.remove(key, t, v, m.wentAt(t, v.now))
		}
	}
}

// wentAt is when a target went: when its last thread exited if they all
// have, else now (its source removed it while threads still ran). Must be
// called with mu held, after its threads were read.
func (m *Monitor) wentAt(t targets.Target, now uint64) uint64 {
	var last uint64
	for _, th := range t.Threads {
		w := m.watched[uint32(th.TID)]
		if w == nil {
			continue
		}
		if w.goneNs == 0 {
			return now
		}
		last = max(last, w.goneNs)
	}
	return cmp.Or(last, now)
}

// expire drops what went more than a Window before now. Must be called
// with mu held.
func (m *Monitor) expire(now uint64) {
	old := func(atNs uint64) bool { return now > atNs && time.Duration(now-atNs) > m.opts.Window }
	for key, g := range m.gone {
		if old(g.atNs) {
			delete(m.gone, key)
		}
	}
	for key, ls := range m.left {
		ls = slices.DeleteFunc(ls, func(g gone[model.Thread]) bool { return old(g.atNs) })
		if len(ls) == 0 {
			delete(m.left, key)
		} else {
			m.left[key] = ls
		}
	}
}

// markGone marks a measured thread gone at `at` unless it went earlier,
// and drops its cumulative counters, which only the metrics use.
func markGone(th *model.Thread, at time.Time) {
	if !th.Gone {
		th.Gone, th.GoneAt = true, at
	}
	th.Cumulative = nil
}

// wallOf is the wall clock time of a CLOCK_MONOTONIC timestamp.
func wallOf(mono uint64) time.Time {
	wall, now := time.Now(), monoNow()
	return wall.Add(-time.Duration(now - min(mono, now))).UTC()
}
