package openmp

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// A window is contended where a thread that was runnable a good part of
// it waited a share of that for its CPU, whether it spun all the window
// or slept between its work; where a CPU was stolen from; or where the
// host's page says a CPU is shared or throttled. Alone, a thread's few
// percent of waiting, a thread that barely ran, and a page that says free
// are not.
func TestOMPContended(t *testing.T) {
	const ms = int64(time.Millisecond)
	span := 100 * ms
	cases := []struct {
		name string
		w    ompWindow
		want bool
	}{
		{"spinning beside a busy loop", ompWindow{span: span, threads: []threadUse{{50 * ms, 50 * ms}}}, true},
		{"sleeping at barriers beside a busy loop", ompWindow{span: span, threads: []threadUse{{6 * ms, 4 * ms}}}, true},
		{"alone", ompWindow{span: span, threads: []threadUse{{95 * ms, 2 * ms}, {40 * ms, 1 * ms}}}, false},
		{"a thread that barely ran", ompWindow{span: span, threads: []threadUse{{1 * ms, 2 * ms}}}, false},
		{"one CPU of four shared", ompWindow{span: span, threads: []threadUse{{90 * ms, 0}, {90 * ms, 0}, {90 * ms, 0}, {50 * ms, 45 * ms}}}, true},
		{"steal", ompWindow{span: span, steal: []float64{0, 0.3}}, true},
		{"a little steal", ompWindow{span: span, steal: []float64{0.02, 0.05}}, false},
		{"the page says shared", ompWindow{span: span, page: []signal.Contention{signal.ContentionFree, signal.ContentionShared}}, true},
		{"the page says throttled", ompWindow{span: span, page: []signal.Contention{signal.ContentionThrottled}}, true},
		{"the page says free", ompWindow{span: span, page: []signal.Contention{signal.ContentionFree, signal.ContentionFree}}, false},
		{"no window", ompWindow{threads: []threadUse{{50 * ms, 50 * ms}}}, false},
	}
	for _, c := range cases {
		if got := ompContended(c.w); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// testMarker is a marker as hybridsync-run gives one.
const testMarker = 299917

// fakeWord is libgomp's spin count for the follower's state machine (the
// real one is found in a real libgomp by libhybridsync/ctest).
type fakeWord struct {
	loaded bool
	n      int
	err    error
	stored []uint64 // the spins stored
	bt     []int64  // the blocktimes stored
}

func (w *fakeWord) Loaded() bool                       { return w.loaded }
func (w *fakeWord) Locate(uint64) (int, string, error) { return w.n, "libgomp.so.1", w.err }
func (w *fakeWord) Store(v Waits) {
	w.stored = append(w.stored, uint64(v.Spin))
	w.bt = append(w.bt, v.BlocktimeMS)
}

// The spin is bounded after ompEnterAfter contended windows in a row (a
// lone one, a program's own start, changes nothing) and given back only
// after ompLeaveAfter free ones in a row; a contended window in between
// starts that count again. Each change is stored once.
func TestOMPFollowerLeaves(t *testing.T) {
	w := &fakeWord{}
	f := NewOMPFollower(w, testMarker, nil, nil, nil)
	f.apply(false)
	for range ompEnterAfter - 1 {
		f.apply(true)
	}
	f.apply(false)
	if len(w.stored) != 0 {
		t.Fatalf("free windows and %d contended in a row stored %v", ompEnterAfter-1, w.stored)
	}
	for range ompEnterAfter {
		f.apply(true)
	}
	if len(w.stored) != 1 || w.stored[0] != GompSpinBounded {
		t.Fatalf("stored %v after %d contended windows in a row, want [%d]", w.stored, ompEnterAfter, GompSpinBounded)
	}
	for range ompLeaveAfter - 1 {
		f.apply(false)
	}
	f.apply(true) // back before it left
	for range ompLeaveAfter - 1 {
		f.apply(false)
	}
	if len(w.stored) != 1 {
		t.Fatalf("stored %v before %d free windows in a row, want [%d]", w.stored, ompLeaveAfter, GompSpinBounded)
	}
	f.apply(false)
	if len(w.stored) != 2 || w.stored[1] != testMarker {
		t.Fatalf("stored %v, want the marker back after %d free windows", w.stored, ompLeaveAfter)
	}
	if want := []int64{0, -1}; !slices.Equal(w.bt, want) {
		t.Errorf("blocktimes stored %v, want %v (bounded, then libomp's own)", w.bt, want)
	}
	st := f.Stats()
	if want := uint64(2 * ompEnterAfter); st.SpinCount != testMarker || st.Changes != 2 || st.Contended != want || st.Windows != 2*ompLeaveAfter+2*ompEnterAfter+1 {
		t.Errorf("stats %+v", st)
	}
}

// Run gives up, with the reason in the stats, where libgomp holds the
// marker twice, and where it is loaded but never holds it; it keeps
// waiting while no libgomp is loaded.
func TestOMPFollowerGivesUp(t *testing.T) {
	run := func(w *fakeWord, within time.Duration) (OMPFollowStats, bool) {
		f := NewOMPFollower(w, testMarker, nil, nil, nil)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { f.Run(stop); close(done) }()
		select {
		case <-done:
			return f.Stats(), true
		case <-time.After(within):
			close(stop)
			<-done
			return f.Stats(), false
		}
	}
	st, ended := run(&fakeWord{loaded: true, err: errors.New("twice")}, time.Minute)
	if !ended || st.Active || !strings.HasPrefix(st.Why, "twice: ") {
		t.Errorf("marker twice: ended %v, %+v", ended, st)
	}
	st, ended = run(&fakeWord{loaded: true}, time.Minute)
	if !ended || st.Active || st.Why == "" {
		t.Errorf("marker never found: ended %v, %+v", ended, st)
	}
	st, ended = run(&fakeWord{}, ompLocateFor+time.Second)
	if ended || st.Active {
		t.Errorf("no libgomp: ended %v, %+v; want it still waiting", ended, st)
	}
}

// The stats count the windows the page answered in and those it said
// contended, apart from the verdict: a window without the page counts in
// neither, whatever its run delay says.
func TestOMPFollowerCountsPage(t *testing.T) {
	const ms = int64(time.Millisecond)
	f := NewOMPFollower(&fakeWord{}, testMarker, nil, nil, nil)
	for _, w := range []ompWindow{
		{span: 100 * ms, page: []signal.Contention{signal.ContentionFree, signal.ContentionShared}},
		{span: 100 * ms, page: []signal.Contention{signal.ContentionFree, signal.ContentionFree}},
		{span: 100 * ms, threads: []threadUse{{50 * ms, 50 * ms}}},
	} {
		f.countPage(w)
		f.apply(ompContended(w))
	}
	if st := f.Stats(); st.Windows != 3 || st.Contended != 2 || st.PageWindows != 2 || st.PageContended != 1 {
		t.Errorf("stats %+v, want 3 windows, 2 contended, the page answering in 2 and saying contended in 1", st)
	}
}
