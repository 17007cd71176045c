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
// bounded whatever the event rate; old events are overwritten.
type timeline struct {
	mu   sync.Mutex
	ring []rawEvent // guarded by mu
	next int        // guarded by mu
	full bool       // guarded by mu
}

func newTimeline(n int) *timeline { return &timeline{ring: make([]rawEvent, n)} }

func (t *timeline) add(ev *bpf.SchedSwitchEvent) {
	r := rawEvent{in: ev.InNs, off: ev.OffNs, run: ev.RunNs, tid: ev.Tid, cpu: ev.Cpu, otgid: ev.OtherTgid,
		preempted: ev.Preempted != 0, throttled: ev.Throttled != 0, waited: ev.Waited != 0}
	for i, c := range ev.OtherComm {
		r.comm[i] = byte(c)
	}
	t.mu.Lock()
	t.ring[t.next] = r
	t.next++
	if t.next == len(t.ring) {
		t.next, t.full = 0, true
	}
	t.mu.Unlock()
}

// Timeline returns the off-CPU intervals of the named target's threads
// that ended in the last `last` (oldest first). name matches a target of any kind.
func (m *Monitor) Timeline(name string, last time.Duration) ([]model.TimelineEvent, error) {
	m.mu.Lock()
	tids := map[uint32]int{}
	for _, t := range m.targets {
		if t.Name == name {
			for _, th := range t.Threads {
				tids[uint32(th.TID)] = th.VCPU
			}
		}
	}
	m.mu.Unlock()
	if len(tids) == 0 {
		return nil, fmt.Errorf("timeline of %q: %w", name, ErrUnknownTarget)
	}
	now := monoNow()
	from := uint64(0)
	if d := uint64(last); d < now {
		from = now - d
	}
	// Wall clock of a monotonic timestamp, good to the microseconds the
	// two clock reads take.
	wallOff := time.Now().UnixNano() - int64(monoNow())

	out := []model.TimelineEvent{}
	t := m.timeline
	t.mu.Lock()
	defer t.mu.Unlock()
	n, start := t.next, 0
	if t.full {
		n, start = len(t.ring), t.next
	}
	for i := 0; i < n; i++ {
		r := &t.ring[(start+i)%len(t.ring)]
		vcpu, ok := tids[r.tid]
		if !ok || r.in < from {
			continue
		}
		comm := r.comm[:]
		for j, c := range comm {
			if c == 0 {
				comm = comm[:j]
				break
			}
		}
		in := int64(r.in) + wallOff
		out = append(out, model.TimelineEvent{
			Out: time.Unix(0, in-int64(r.off)).UTC(), In: time.Unix(0, in).UTC(), InMonoNs: r.in,
			TID: r.tid, VCPU: vcpu, CPU: r.cpu, RunUS: float64(r.run) / 1e3, OffUS: float64(r.off) / 1e3,
			Preempted: r.preempted, Throttled: r.throttled, Waited: r.waited,
			OtherTGID: r.otgid, OtherComm: string(comm),
		})
	}
	return out, nil
}
