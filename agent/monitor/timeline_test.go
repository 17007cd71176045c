package monitor

import (
	"slices"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// TestTimelinePages: a paged read returns every event of the watched
// threads once, in order, never more than the page's limit, stops at the
// end fixed by its first page, and counts what the ring overwrote while
// it was behind.
func TestTimelinePages(t *testing.T) {
	tl := newTimeline(8)
	tl.setTarget("pid/9", "9", []uint32{1, 2})
	add := func(from, to int) {
		for i := from; i < to; i++ {
			tl.add(&bpf.SchedSwitchEvent{InNs: uint64(1000 + i), Tid: uint32(1 + i%2)})
		}
	}
	add(0, 5)
	watched := map[uint32]int{1: 0} // tid 1: the even events
	var (
		got []uint64
		cur = TimelineCursor{End: ^uint64(0)}
	)
	for pages := 0; ; pages++ {
		raw, p := tl.read("9", watched, cur, 2)
		if len(raw) > 2 || p.Overwritten != 0 {
			t.Fatalf("page %d: %d events, %d overwritten", pages, len(raw), p.Overwritten)
		}
		for _, r := range raw {
			got = append(got, r.in)
		}
		if pages == 0 {
			add(5, 7) // after the first page: not part of this read
		}
		if !p.More {
			break
		}
		cur = p.Cursor
	}
	if want := []uint64{1000, 1002, 1004}; !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}

	// A reader at sequence 3 while 20 more events arrive: the ring (8)
	// kept 19..26, so 3..18 are reported overwritten.
	add(7, 27)
	raw, p := tl.read("9", watched, TimelineCursor{Next: 3, End: 27}, 100)
	if p.Overwritten != 16 || p.More || len(raw) != 4 || raw[0].in != 1020 {
		t.Fatalf("behind the ring: %d events from %v, page %+v", len(raw), raw, p)
	}
	// FromNs drops older switch-ins.
	raw, _ = tl.read("9", watched, TimelineCursor{End: ^uint64(0), FromNs: 1023}, 100)
	if len(raw) != 2 || raw[0].in != 1024 {
		t.Fatalf("from 1023: %v", raw)
	}
}

// TestTimelineSharePerTarget: a busy target overwrites its own share of
// the ring, never another target's events; the shares follow the targets.
func TestTimelineSharePerTarget(t *testing.T) {
	tl := newTimeline(100)
	tl.setTarget("pid/1", "1", []uint32{1})
	tl.setTarget("pid/2", "2", []uint32{2})
	for i := range 10 {
		tl.add(&bpf.SchedSwitchEvent{InNs: uint64(i), Tid: 2})
	}
	for i := range 100000 { // the busy one
		tl.add(&bpf.SchedSwitchEvent{InNs: uint64(i), Tid: 1})
	}
	tl.add(&bpf.SchedSwitchEvent{InNs: 7, Tid: 3}) // no target's: kept nowhere
	read := func(name string, tid uint32) []rawEvent {
		raw, _ := tl.read(name, map[uint32]int{tid: -1}, TimelineCursor{End: ^uint64(0)}, 1000)
		return raw
	}
	if got := read("2", 2); len(got) != 10 {
		t.Errorf("the quiet target kept %d of its 10 events beside a busy one", len(got))
	}
	if got := read("1", 1); len(got) != 50 || got[49].in != 99999 {
		t.Errorf("the busy target kept %d events (want its share, 50, the latest)", len(got))
	}
	// A third target: the shares shrink to 33, each keeping its latest.
	tl.setTarget("cgroup/x", "x", []uint32{3})
	if got := read("2", 2); len(got) != 10 {
		t.Errorf("after a third target came, the quiet one kept %d of 10", len(got))
	}
	if got := read("1", 1); len(got) != 33 || got[0].in != 99967 {
		t.Errorf("after a third target came, the busy one kept %d (first %v), want the latest 33", len(got), got[0].in)
	}
	// A target gone: its ring goes, and its name reads nothing.
	tl.setTarget("pid/2", "2", nil)
	if got := read("2", 2); len(got) != 0 {
		t.Errorf("a gone target's timeline: %d events", len(got))
	}
}
