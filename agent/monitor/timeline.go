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

// timeline keeps the latest switch events of each target in a ring of
// its own: memory stays bounded whatever the event rate (the rings share
// total events, each target an equal part), and a busy target overwrites
// only its own events. With one shared ring, a target switching 100k
// times a second flushed every other target's hour of timeline in
// seconds. Every event of a ring has a sequence number (the count of
// events added to it before), so that a reader can page through it and
// know what it missed.
type timeline struct {
	mu    sync.Mutex
	total int              // events all rings together may hold
	rings map[string]*ring // by target name (a read is by name); guarded by mu
	byTID map[uint32]*ring // guarded by mu
	// names holds each target key's name and threads, to share the
	// rings out again as targets come and go; guarded by mu.
	names map[string]targetThreads
}

type targetThreads struct {
	name string
	tids []uint32
}

// ring is one target's events: ev has room for capacity events, made on
// its first event; the event of sequence number n is at n % capacity.
type ring struct {
	ev       []rawEvent
	capacity int
	added    uint64 // the next event's sequence number
}

func newTimeline(total int) *timeline {
	return &timeline{total: total, rings: map[string]*ring{}, byTID: map[uint32]*ring{}, names: map[string]targetThreads{}}
}

// setTarget records the target key's name and threads (nil tids: it
// went), and shares the rings out again when the set of names changed.
func (t *timeline) setTarget(key, name string, tids []uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tids == nil {
		delete(t.names, key)
	} else {
		t.names[key] = targetThreads{name, tids}
	}
	live := map[string]bool{}
	for _, tt := range t.names {
		live[tt.name] = true
	}
	for name := range t.rings {
		if !live[name] {
			delete(t.rings, name)
		}
	}
	share := max(1, t.total/max(1, len(live)))
	for name := range live {
		r := t.rings[name]
		if r == nil {
			r = &ring{}
			t.rings[name] = r
		}
		r.resize(share)
	}
	clear(t.byTID)
	for _, tt := range t.names {
		for _, tid := range tt.tids {
			t.byTID[tid] = t.rings[tt.name]
		}
	}
}

// resize gives r room for n events, keeping its latest ones.
func (r *ring) resize(n int) {
	if n == r.capacity {
		return
	}
	if r.ev != nil {
		ev := make([]rawEvent, n)
		kept := min(r.added, uint64(n), uint64(r.capacity))
		for seq := r.added - kept; seq < r.added; seq++ {
			ev[seq%uint64(n)] = r.ev[seq%uint64(r.capacity)]
		}
		r.ev = ev
	}
	r.capacity = n
}

func (r *ring) put(e *rawEvent) {
	if r.ev == nil {
		r.ev = make([]rawEvent, r.capacity)
	}
	r.ev[r.added%uint64(r.capacity)] = *e
	r.added++
}

func (t *timeline) add(ev *bpf.SchedSwitchEvent) {
	r := rawEvent{in: ev.InNs, off: ev.OffNs, run: ev.RunNs, tid: ev.Tid, cpu: ev.Cpu, otgid: ev.OtherTgid,
		preempted: ev.Preempted != 0, throttled: ev.Throttled != 0, waited: ev.Waited != 0}
	for i, c := range ev.OtherComm {
		r.comm[i] = byte(c)
	}
	t.mu.Lock()
	if rg := t.byTID[ev.Tid]; rg != nil { // else no target reads it
		rg.put(&r)
	}
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
	raw, p := m.timeline.read(name, tids, cur, limit)
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

// read copies at most limit of tids' events, from cur on, out of name's
// ring: the copy a page needs and no more, so that the lock is held only
// for one bounded scan of the ring.
func (t *timeline) read(name string, tids map[uint32]int, cur TimelineCursor, limit int) ([]rawEvent, TimelinePage) {
	out := make([]rawEvent, 0, min(limit, 4096))
	t.mu.Lock()
	defer t.mu.Unlock()
	p := TimelinePage{}
	r := t.rings[name]
	if r == nil || r.ev == nil {
		return out, p // nothing yet
	}
	oldest := r.added - min(r.added, uint64(r.capacity))
	switch {
	case cur.End > r.added: // the first page (or a ring made anew since)
		cur.Next, cur.End = oldest, r.added
	case cur.Next < oldest:
		p.Overwritten, cur.Next = oldest-cur.Next, oldest
	}
	for ; cur.Next < cur.End && len(out) < limit; cur.Next++ {
		e := &r.ev[cur.Next%uint64(r.capacity)]
		if _, ok := tids[e.tid]; ok && e.in >= cur.FromNs {
			out = append(out, *e)
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
