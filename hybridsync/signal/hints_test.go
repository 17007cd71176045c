package signal

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
)

func newHintPage(t testing.TB, n int, flags uint32) (*hintpage.Writer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vgpu-probe-hints-test")
	w, err := hintpage.Create(path, n, flags, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, path
}

func runningSlot(tid int, now int64) hintpage.Slot {
	return hintpage.Slot{TID: uint32(tid), State: hintpage.StateRunning, Contention: hintpage.ContShared,
		SwitchInNs: uint64(now - 1_000_000), SliceNs: 4_000_000, PublishNs: uint64(now - 1_000_000)}
}

func TestHintSourceThreadPage(t *testing.T) {
	w, path := newHintPage(t, 4, 0)
	now := clock.Now()
	s := runningSlot(77, now)
	w.Publish(2, &s)
	h := NewHintSource(path, nil, nil)
	if got := h.Remaining(77, now); got != 3_000_000 {
		t.Fatalf("Remaining = %d, want 3 ms (4 ms slice, switched in 1 ms ago)", got)
	}
	if got := h.Contention(77, now); got != ContentionShared {
		t.Fatalf("Contention = %v", got)
	}
	// Not yet published as running: assume the switch-in came right
	// after the switch-out.
	s.State, s.SwitchOutNs = hintpage.StatePreempted, uint64(now-500_000)
	w.Publish(2, &s)
	if got := h.Remaining(77, now); got != 3_500_000 {
		t.Fatalf("Remaining while the page lags = %d, want 3.5 ms", got)
	}
	s.Contention, s.SliceNs = hintpage.ContFree, hintpage.Infinite
	w.Publish(2, &s)
	if got, c := h.Remaining(77, now), h.Contention(77, now); got != clock.Infinite || c != ContentionFree {
		t.Fatalf("free CPU: Remaining %d Contention %v", got, c)
	}
	s = runningSlot(77, now)
	s.Contention, s.QuotaUS, s.PeriodUS = hintpage.ContThrottled, 10_000, 20_000
	w.Publish(2, &s)
	if c := h.Contention(77, now); c != ContentionThrottled {
		t.Fatalf("Contention = %v, want throttled", c)
	}
	if st := h.Stats(); st.Used == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHintSourceMitigation: the page's mitigation slice for the calling
// thread; none where the slot says 0, where it is stale, where there is
// no slot; and armChooser finds it through the source it is given.
func TestHintSourceMitigation(t *testing.T) {
	w, path := newHintPage(t, 2, 0)
	now := clock.Now()
	s := runningSlot(77, now)
	s.MitigationNs = 100_000
	w.Publish(0, &s)
	other := runningSlot(78, now)
	w.Publish(1, &other)
	h := NewHintSource(path, nil, nil)
	if d, ok := h.Mitigation(77); !ok || d != 100*time.Microsecond {
		t.Errorf("mitigated thread: %v %v, want 100µs", d, ok)
	}
	if d, ok := h.Mitigation(78); ok || d != 0 {
		t.Errorf("thread without: %v %v", d, ok)
	}
	if _, ok := h.Mitigation(79); ok {
		t.Error("thread with no slot: mitigated")
	}
	s.PublishNs = uint64(now - 2*hintMaxAge)
	w.Publish(0, &s)
	if _, ok := h.Mitigation(77); ok {
		t.Error("stale slot: mitigated")
	}
}

// A policy that blocks at once on a shared CPU asks the page only about
// contention: those answers count as used, a slot that does not know yet
// as a fallback.
func TestHintSourceCountsContention(t *testing.T) {
	w, path := newHintPage(t, 1, 0)
	now := clock.Now()
	s := runningSlot(77, now)
	w.Publish(0, &s)
	h := NewHintSource(path, nil, fixedContention(ContentionUnknown))
	for range 3 {
		if c := h.Contention(77, now); c != ContentionShared {
			t.Fatalf("Contention = %v, want shared", c)
		}
	}
	if st := h.Stats(); st.Used != 3 {
		t.Fatalf("stats %+v, want 3 used", st)
	}
	h = NewHintSource(path, nil, fixedContention(ContentionThrottled))
	s.Contention = hintpage.ContUnknown
	w.Publish(0, &s)
	if c := h.Contention(77, now); c != ContentionThrottled {
		t.Fatalf("Contention of an unknown slot = %v, want the fallback's", c)
	}
	if st := h.Stats(); st.Used != 0 || st.Fallbacks["unknown"] != 1 {
		t.Fatalf("stats %+v, want 0 used and 1 unknown", st)
	}
}

// TestHintSourceSharedChecked: on a thread's page, "shared" stands where
// the thread's own accounting agrees or cannot tell, and gives way where
// it says free or throttled; on a vCPU's page it stands.
func TestHintSourceSharedChecked(t *testing.T) {
	w, path := newHintPage(t, 1, 0)
	now := clock.Now()
	s := runningSlot(77, now)
	w.Publish(0, &s)
	for _, own := range []Contention{ContentionShared, ContentionUnknown, ContentionFree, ContentionThrottled} {
		want := own
		if own == ContentionUnknown {
			want = ContentionShared
		}
		h := NewHintSource(path, nil, fixedContention(own))
		if c := h.Contention(77, now); c != want {
			t.Errorf("page shared, the thread's own %v: %v, want %v", own, c, want)
		}
	}
	vw, vpath := newHintPage(t, 64, hintpage.FlagVCPU)
	vs := runningSlot(0, now)
	for cpu := range 64 {
		vw.Publish(cpu, &vs)
	}
	h := NewHintSource(vpath, nil, fixedContention(ContentionFree))
	if c := h.Contention(77, now); c != ContentionShared {
		t.Errorf("vCPU page shared, the guest thread's own free: %v, want shared", c)
	}
}

// TestHintSourceFallsBack: each way the page can be unusable leads to the
// guest-only estimate and the fallback contention, never a crash.
func TestHintSourceFallsBack(t *testing.T) {
	now := clock.Now()
	est := &GuestEstimator{}
	// Three deschedulings teach the estimator a 2 ms slice.
	for i := int64(0); i < 4; i++ {
		start := now - 40_000_000 + i*3_000_000
		est.Gap(5, start, start+1_000_000)
	}
	want := est.Remaining(5, now)
	check := func(name string, h *HintSource, reason string) {
		t.Helper()
		if got := h.Remaining(5, now); got != want {
			t.Errorf("%s: Remaining %d, want the estimator's %d", name, got, want)
		}
		if c := h.Contention(5, now); c != ContentionThrottled {
			t.Errorf("%s: Contention %v, want the fallback's", name, c)
		}
		if st := h.Stats(); st.Fallbacks[reason] == 0 {
			t.Errorf("%s: fallbacks %v, want some %q", name, st.Fallbacks, reason)
		}
	}
	fixed := fixedContention(ContentionThrottled)

	check("missing", NewHintSource(filepath.Join(t.TempDir(), "none"), est, fixed), "missing")

	w, path := newHintPage(t, 1, 0)
	s := runningSlot(5, now)
	s.PublishNs = uint64(now - 2_000_000_000)
	s.SwitchInNs = s.PublishNs
	w.Publish(0, &s)
	check("stale", NewHintSource(path, est, fixed), "stale")

	s = runningSlot(6, now)
	w.Publish(0, &s)
	check("another thread's page", NewHintSource(path, est, fixed), "no_slot")

	raw, _ := os.ReadFile(path)
	for name, edit := range map[string]func([]byte) []byte{
		"version 1":  func(b []byte) []byte { binary.LittleEndian.PutUint16(b[4:], 1); return b },
		"truncated":  func(b []byte) []byte { return b[:100] },
		"wrong size": func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 200); return b },
	} {
		p := filepath.Join(t.TempDir(), "page")
		if err := os.WriteFile(p, edit(append([]byte(nil), raw...)), 0o600); err != nil {
			t.Fatal(err)
		}
		check(name, NewHintSource(p, est, fixed), "missing")
	}

	s = runningSlot(5, now)
	s.SliceNs = 60e9
	w.Publish(0, &s)
	check("absurd", NewHintSource(path, est, fixed), "absurd")
}

type fixedContention Contention

func (f fixedContention) Contention(int, int64) Contention { return Contention(f) }

func TestHintSourceReopensReplacedPage(t *testing.T) {
	w, path := newHintPage(t, 1, 0)
	now := clock.Now()
	s := runningSlot(9, now)
	w.Publish(0, &s)
	h := NewHintSource(path, nil, nil)
	if got := h.Remaining(9, now); got != 3_000_000 {
		t.Fatalf("Remaining = %d", got)
	}
	w2, err := hintpage.Create(path, 1, 0, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	s.SliceNs = 8_000_000
	w2.Publish(0, &s)
	if got := h.Remaining(9, now); got != 3_000_000 {
		t.Fatalf("re-opened before reopenEvery: %d", got)
	}
	later := now + 2*reopenEvery
	s.PublishNs, s.SwitchInNs = uint64(later-1_000_000), uint64(later-1_000_000)
	w2.Publish(0, &s)
	if got := h.Remaining(9, later); got != 7_000_000 {
		t.Fatalf("after replacement: Remaining = %d, want 7 ms from the new page", got)
	}
}

// TestHintSourceVCPUPage: a guest finds its slot by CPU and learns the
// host-guest clock offset from publish times.
func TestHintSourceVCPUPage(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := runtime.NumCPU()
	w, path := newHintPage(t, n, hintpage.FlagVCPU)
	const hostAhead = 5_000_000_000 // host clock 5 s ahead of ours
	now := clock.Now()
	for i := range n {
		s := runningSlot(0, now+hostAhead)
		s.PublishNs = s.SwitchInNs + 100_000 // published 100 µs after the switch-in
		w.Publish(i, &s)
	}
	h := NewHintSource(path, nil, nil)
	// The offset is learned as publish - now, so 'now' reads as 100 µs
	// after the switch-in: 3.9 ms left.
	if got := h.Remaining(0, now); got != 3_900_000 {
		t.Fatalf("Remaining = %d, want 3.9 ms", got)
	}
	if got := h.Remaining(0, now+1_000_000); got != 2_900_000 {
		t.Fatalf("1 ms later: Remaining = %d, want 2.9 ms", got)
	}
}

func TestHintsAt(t *testing.T) {
	if h, err := HintsAt("", nil, nil); h != nil || err != nil {
		t.Fatalf("unset: %v %v", h, err)
	}
	h, err := HintsAt("/nonexistent/page", nil, nil)
	if h == nil || err == nil {
		t.Fatalf("missing page: want a source that falls back and an error to log, got %v %v", h, err)
	}
	_, path := newHintPage(t, 1, 0)
	if h, err := HintsAt(path, nil, nil); h == nil || err != nil {
		t.Fatalf("good page: %v %v", h, err)
	}
}

// TestHintsAtNotAPage: a FIFO (whose blocking open would wait for a
// writer forever), a device or a directory is refused at once, with
// hintpage.ErrNotRegular, and the source falls back as for a bad page.
func TestHintsAtNotAPage(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, os.DevNull, t.TempDir()} {
		type res struct {
			h   *HintSource
			err error
		}
		done := make(chan res, 1)
		go func() {
			h, err := HintsAt(path, nil, nil)
			done <- res{h, err}
		}()
		var r res
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: HintsAt still blocked after 30 s", path)
		}
		if r.h == nil || !errors.Is(r.err, hintpage.ErrNotRegular) || !strings.Contains(r.err.Error(), EnvHints) {
			t.Fatalf("%s: %v %v, want a source that falls back and ErrNotRegular naming %s", path, r.h, r.err, EnvHints)
		}
		if got := r.h.Contention(1, clock.Now()); got != ContentionUnknown || r.h.Stats().Fallbacks["missing"] != 1 {
			t.Errorf("%s: contention %v, stats %+v: want a fallback for a missing page", path, got, r.h.Stats())
		}
	}
}

func BenchmarkHintRemaining(b *testing.B) {
	w, path := newHintPage(b, 8, 0)
	now := clock.Now()
	for i := range 8 {
		s := runningSlot(100+i, now)
		w.Publish(i, &s)
	}
	h := NewHintSource(path, nil, nil)
	b.ResetTimer()
	for range b.N {
		h.Remaining(107, now)
	}
}

func BenchmarkHintRemainingVCPU(b *testing.B) {
	n := runtime.NumCPU()
	w, path := newHintPage(b, n, hintpage.FlagVCPU)
	now := clock.Now()
	for i := range n {
		s := runningSlot(0, now)
		w.Publish(i, &s)
	}
	h := NewHintSource(path, nil, nil)
	b.ResetTimer()
	for range b.N {
		h.Remaining(0, now)
	}
}

// CPUContention reads a vCPU page's slot of the CPU asked for, whatever
// CPU the caller runs on; a thread page (the host's own targets), a slot
// that is stale and a slot the publisher has no verdict for yet tell
// nothing.
func TestCPUContention(t *testing.T) {
	now := clock.Now()
	vw, vpath := newHintPage(t, 4, hintpage.FlagVCPU)
	free, shared := runningSlot(0, now), runningSlot(0, now)
	free.Contention = hintpage.ContFree
	stale := shared
	stale.PublishNs = uint64(now - 10*hintMaxAge)
	unknown := free
	unknown.Contention = hintpage.ContUnknown
	for cpu, s := range []hintpage.Slot{free, shared, stale, unknown} {
		vw.Publish(cpu, &s)
	}
	h := NewHintSource(vpath, nil, nil)
	for cpu, want := range []struct {
		c  Contention
		ok bool
	}{{ContentionFree, true}, {ContentionShared, true}, {ContentionUnknown, false}, {ContentionUnknown, false}} {
		if c, ok := h.CPUContention(cpu, now); c != want.c || ok != want.ok {
			t.Errorf("CPU %d: %v %v, want %v %v", cpu, c, ok, want.c, want.ok)
		}
	}
	if _, ok := h.CPUContention(9, now); ok {
		t.Error("a CPU past the page's slots told something")
	}
	tw, tpath := newHintPage(t, 4, 0)
	tw.Publish(0, &shared)
	if _, ok := NewHintSource(tpath, nil, nil).CPUContention(0, now); ok {
		t.Error("a thread page told a CPU's contention")
	}
}
