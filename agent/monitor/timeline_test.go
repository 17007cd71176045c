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
		raw, p := tl.read(watched, cur, 2)
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
	raw, p := tl.read(watched, TimelineCursor{Next: 3, End: 27}, 100)
	if p.Overwritten != 16 || p.More || len(raw) != 4 || raw[0].in != 1020 {
		t.Fatalf("behind the ring: %d events from %v, page %+v", len(raw), raw, p)
	}
	// FromNs drops older switch-ins.
	raw, _ = tl.read(watched, TimelineCursor{End: ^uint64(0), FromNs: 1023}, 100)
	if len(raw) != 2 || raw[0].in != 1024 {
		t.Fatalf("from 1023: %v", raw)
	}
}
