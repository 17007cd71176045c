package monitor

import (
	"fmt"
	"sync"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/bpf"
)

type rawEvent struct {
	in, off, run                 uint64
	tid, cpu, otgid              uint32
	preempted, throttled, waited bool
	comm                         [16]byte
}

// timeline is a fixed-size ring of the latest switch events: memory stays
// bounded whatever the event rate; old events are overwritten. Every event
// has a sequence number (the count of events added before it), so that a
// reader can page through the ring and know what it missed.
type timeline struct {
	mu    sync.Mutex
	ring  []rawEvent // guarded by mu
	added uint64     // guarded by mu; the next event's sequence number
}

func newTimeline(n int) *timeline { return &timeline{ring: make([]rawEvent, n)} }

func (t *timeline) add(ev *bpf.SchedSwitchEvent) {
	r := rawEvent{in: ev.InNs, off: ev.OffNs, run: ev.RunNs, tid: ev.Tid, cpu: ev.Cpu, otgid: ev.OtherTgid,
		preempted: ev.Preempted != 0, throttled: ev.Throttled != 0, waited: ev.Waited != 0}
	for i, c := range ev.OtherComm {
		r.comm[i] = byte(c)
	}
	t.mu.Lock()
	t.ring[t.added%uint64(len(t.ring))] = r
	t.added++
	t.mu.Unlock()
}

// TimelineCursor is where a paged timeline read stands: the next sequence
// number to look at, the end fixed by the first page (events that arrive
// later are not chased, so a busy target's pages end), and the oldest
// switch-in time wanted. The zero cursor starts a read.
type TimelineCursor struct {
	Next, End, FromNs uint64
}

// TimelinePage is one page of a timeline read.
type TimelinePage struct {
	Events []model.TimelineEvent
	// Cursor continues the read; More says whether there is more to read.
	Cursor TimelineCursor
	More   bool
	// Overwritten counts the events the ring overwrote between the
	// previous page and this one (a reader slower than the target).
	Overwritten uint64
}

// Timeline returns the off-CPU intervals of the named target's threads
// that ended in the last `last` (oldest first). name matches a target of
// any kind. It reads every page: its result is bounded by the ring only;
// servers use TimelinePage.
func (m *Monitor) Timeline(name string, last time.Duration) ([]model.TimelineEvent, error) {
	var (
		out []model.TimelineEvent
		cur TimelineCursor
	)
	for {
		p, err := m.TimelinePage(name, last, cur, 1<<16)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Events...)
		if !p.More {
			if out == nil {
				out = []model.TimelineEvent{}
			}
			return out, nil
		}
		cur = p.Cursor
	}
}

// TimelinePage returns at most limit off-CPU intervals of the named
// target's threads, oldest first, continuing the read at cur. The first
// page (zero cursor) fixes the read: intervals that ended in the last
// `last` and reached the ring before it; later pages ignore last.
func (m *Monitor) TimelinePage(name string, last time.Duration, cur TimelineCursor, limit int) (TimelinePage, error) {
	tids := m.threadsOf(name)
	if len(tids) == 0 {
		return TimelinePage{}, fmt.Errorf("timeline of %q: %w", name, ErrUnknownTarget)
	}
	if limit <= 0 {
		limit = 1
	}
	if cur == (TimelineCursor{}) {
		now := monoNow()
		if d := uint64(last); d < now {
			cur.FromNs = now - d
		}
		cur.End = ^uint64(0) // set from the ring below
	}
	raw, p := m.timeline.read(tids, cur, limit)
	// Wall clock of a monotonic timestamp, good to the microseconds the
	// two clock reads take.
	wallOff := time.Now().UnixNano() - int64(monoNow())
	p.Events = make([]model.TimelineEvent, len(raw))
	for i := range raw {
		p.Events[i] = raw[i].event(tids[raw[i].tid], wallOff)
	}
	return p, nil
}

// threadsOf maps the thread ids of the targets called name to their vCPU.
func (m *Monitor) threadsOf(name string) map[uint32]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	tids := map[uint32]int{}
	for _, t := range m.targets {
		if t.Name == name {
			for _, th := range t.Threads {
				tids[uint32(th.TID)] = th.VCPU
			}
		}
	}
	return tids
}

// read copies at most limit of tids' events, from cur on, out of the
// ring: the copy a page needs and no more, so that the lock is held only
// for one bounded scan of the ring.
func (t *timeline) read(tids map[uint32]int, cur TimelineCursor, limit int) ([]rawEvent, TimelinePage) {
	out := make([]rawEvent, 0, min(limit, 4096))
	t.mu.Lock()
	defer t.mu.Unlock()
	p := TimelinePage{}
	oldest := t.added - min(t.added, uint64(len(t.ring)))
	switch {
	case cur.End > t.added: // the first page
		cur.Next, cur.End = oldest, t.added
	case cur.Next < oldest:
		p.Overwritten, cur.Next = oldest-cur.Next, oldest
	}
	for ; cur.Next < cur.End && len(out) < limit; cur.Next++ {
		r := &t.ring[cur.Next%uint64(len(t.ring))]
		if _, ok := tids[r.tid]; ok && r.in >= cur.FromNs {
			out = append(out, *r)
		}
	}
	p.Cursor, p.More = cur, cur.Next < cur.End
	return out, p
}

// event is r as served, for the thread's vCPU and the wall clock's offset
// from the monotonic one.
func (r *rawEvent) event(vcpu int, wallOff int64) model.TimelineEvent {
	comm := r.comm[:]
	for j, c := range comm {
		if c == 0 {
			comm = comm[:j]
			break
		}
	}
	in := int64(r.in) + wallOff
	return model.TimelineEvent{
		Out: time.Unix(0, in-int64(r.off)).UTC(), In: time.Unix(0, in).UTC(), InMonoNs: r.in,
		TID: r.tid, VCPU: vcpu, CPU: r.cpu, RunUS: float64(r.run) / 1e3, OffUS: float64(r.off) / 1e3,
		Preempted: r.preempted, Throttled: r.throttled, Waited: r.waited,
		OtherTGID: r.otgid, OtherComm: string(comm),
	}
}
