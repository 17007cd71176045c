package signal

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
)

// EnvHints names the hint page the library reads (HYBRIDSYNC_HINTS):
// /dev/shm/vgpu-probe-hints in a guest (made by `vgpu-probe guest`), the
// agent's DIR/vgpu-probe-hints-TARGET for a local target.
const EnvHints = "HYBRIDSYNC_HINTS"

// HintSource is the host-hint ThresholdSource and ContentionSource: it
// reads the page the host agent publishes about the CPU this thread runs
// on (the guest's vCPU, or the thread itself for a local target), without
// locks. Whenever the page is missing, replaced, torn, stale, of another
// version or absurd, it answers from its fallbacks instead: the guest-only
// estimate for the slice, the fallback contention source (or Unknown).
type HintSource struct {
	path     string
	fallback *GuestEstimator
	cont     ContentionSource

	file    atomic.Pointer[hintpage.File]
	live    atomic.Pointer[liveArray] // the page's live array, when the agent gave it
	checked atomic.Int64              // when the page was last (re)opened or checked for replacement
	mu      sync.Mutex                // serialises re-opening

	// offset (page clock - this clock, ns) for vCPU pages: the largest
	// publish-minus-now seen, decaying, see calibrate.
	offset    atomic.Int64
	offsetAt  atomic.Int64
	calibrate atomic.Bool // guest side: the page clock is the host's

	slotCache [64]atomic.Uint64 // tid<<16 | slot+1, for thread pages

	used      atomic.Uint64
	fallbacks [fbReasons]atomic.Uint64
}

// Fallback reasons counted by HintSource (HintStats).
const (
	fbMissing = iota // no page, or it did not parse
	fbTorn
	fbStale
	fbAbsurd
	fbNoSlot
	fbUnknown // the publisher has no slice estimate yet
	fbReasons
)

var fbNames = [fbReasons]string{"missing", "torn", "stale", "absurd", "no_slot", "unknown"}

// Freshness and clock tolerances (ns). The publisher refreshes every slot
// at least every 100 ms (agent/hints: RefreshEvery, RefreshMappedEvery),
// so 250 ms without one means it stopped. reopenEvery bounds how often the file is stat'ed for
// replacement: a stat costs about a µs, far more than a read.
const (
	hintMaxAge  = 250_000_000
	hintSkew    = 5_000_000
	reopenEvery = 1_000_000_000
	// offsetDecay: ns per s the calibrated offset is lowered so that it
	// follows a guest clock running slower than the host's (kvmclock and
	// the host's CLOCK_MONOTONIC drift apart by a few ppm).
	offsetDecay = 20_000
)

// NewHintSource reads the page at path, falling back to fallback (a new
// GuestEstimator if nil) and cont (nil: ContentionUnknown). The page need
// not exist yet: it is opened on first use and re-opened when replaced.
func NewHintSource(path string, fallback *GuestEstimator, cont ContentionSource) *HintSource {
	h := newHintSource(path, fallback, cont)
	h.reopen(clock.Now())
	return h
}

// newHintSource is NewHintSource before the page is first opened.
func newHintSource(path string, fallback *GuestEstimator, cont ContentionSource) *HintSource {
	if fallback == nil {
		fallback = &GuestEstimator{}
	}
	return &HintSource{path: path, fallback: fallback, cont: cont}
}

// HintsAt returns a HintSource for the page at path (HYBRIDSYNC_HINTS,
// as hybridsync's configuration parsed it), or nil for "". A page that
// cannot be read now is not an error (the agent may start later); an
// error says why it is not used yet, for the log.
func HintsAt(path string, fallback *GuestEstimator, cont ContentionSource) (*HintSource, error) {
	if path == "" {
		return nil, nil
	}
	h := newHintSource(path, fallback, cont)
	switch err := h.reopen(clock.Now()); {
	case errors.Is(err, hintpage.ErrNotRegular):
		// Never a page, and the user should know: a FIFO or a device
		// named by mistake. It is looked at again as a replaced page
		// would be.
		return h, fmt.Errorf("%s: %w (refused; using the guest-only estimate)", EnvHints, err)
	case err != nil:
		return h, fmt.Errorf("%s: %w (using the guest-only estimate until it appears)", EnvHints, err)
	}
	return h, nil
}

var (
	_ ThresholdSource  = (*HintSource)(nil)
	_ ContentionSource = (*HintSource)(nil)
	_ GapObserver      = (*HintSource)(nil)
)

// reopen maps the page again if it is missing or was replaced; at most
// once per reopenEvery, by one thread. The error is why the page could
// not be mapped (nil: mapped, unchanged, or another thread is at it).
func (h *HintSource) reopen(now int64) error {
	if !h.mu.TryLock() {
		return nil
	}
	defer h.mu.Unlock()
	h.checked.Store(now)
	old := h.file.Load()
	if old != nil && !old.Replaced() {
		// The agent may have started its socket after the page.
		if h.live.Load() == nil && old.Header().Flags&hintpage.FlagVCPU == 0 {
			if la, err := connectLive(old); err == nil {
				h.live.Store(la)
			}
		}
		return nil
	}
	f, err := hintpage.Map(h.path)
	if err != nil {
		f = nil
	}
	// The live array first: a reader that sees the new page sees its
	// array, if any (or the old one, which readLive ignores: another page).
	var la *liveArray
	if f != nil {
		la, _ = connectLive(f) // nil: the page's own live blocks
	}
	if oldLive := h.live.Swap(la); oldLive != nil {
		// Its mapping stays (a reader may be inside it); the agent is
		// told it is no longer used.
		unix.Close(oldLive.sock)
	}
	h.file.Store(f)
	if f != nil {
		h.calibrate.Store(f.Header().Flags&hintpage.FlagVCPU != 0)
		h.offset.Store(0)
		h.offsetAt.Store(0)
	}
	// The old mapping is left mapped: a reader may still be inside it, and
	// a page is replaced only when the agent restarts.
	return err
}

// slot reads the calling thread's slot and converts now to the page's
// clock; ok is false (with the reason counted) when it must not be used.
func (h *HintSource) slot(tid int, now int64, s *hintpage.Slot) (pageNow int64, ok bool) {
	if now-h.checked.Load() > reopenEvery {
		h.reopen(now)
	}
	f := h.file.Load()
	if f == nil {
		h.fallbacks[fbMissing].Add(1)
		return 0, false
	}
	var err error
	if f.Header().Flags&hintpage.FlagVCPU != 0 {
		err = f.ReadSlot(currentCPU(), s)
	} else {
		var i int
		if i, err = h.findTID(f, tid, s); err == nil {
			if l := h.live.Load(); l != nil && l.file == f {
				l.readLive(i, uint32(tid), s)
			}
		}
	}
	if err == nil {
		pageNow = h.pageClock(now, s)
		err = s.Check(pageNow, hintMaxAge, hintSkew)
	}
	if err != nil {
		h.fallbacks[reason(err)].Add(1)
		return 0, false
	}
	return pageNow, true
}

func reason(err error) int {
	switch {
	case errors.Is(err, hintpage.ErrTorn):
		return fbTorn
	case errors.Is(err, hintpage.ErrStale):
		return fbStale
	case errors.Is(err, hintpage.ErrNoSlot):
		return fbNoSlot
	case errors.Is(err, hintpage.ErrFault):
		return fbMissing
	}
	return fbAbsurd
}

// findTID uses a small cache of tid -> slot so that a page of many
// threads is not scanned on every call.
func (h *HintSource) findTID(f *hintpage.File, tid int, s *hintpage.Slot) (int, error) {
	c := &h.slotCache[uint(tid)%uint(len(h.slotCache))]
	if v := c.Load(); v>>16 == uint64(tid) && v&0xffff != 0 {
		if err := f.ReadSlot(int(v&0xffff)-1, s); err == nil && s.TID == uint32(tid) {
			return int(v&0xffff) - 1, nil
		}
	}
	if err := f.FindTID(tid, s); err != nil {
		return -1, err
	}
	for i := 0; i < f.Slots() && i < 0xfffe; i++ {
		var t hintpage.Slot
		if f.ReadSlot(i, &t) == nil && t.TID == uint32(tid) {
			c.Store(uint64(tid)<<16 | uint64(i+1))
			return i, nil
		}
	}
	return -1, hintpage.ErrTorn // it moved meanwhile
}

// pageClock converts now (this machine's CLOCK_MONOTONIC) to the page's
// clock. A local target shares the clock. In a guest the page holds the
// host's CLOCK_MONOTONIC: each read learns a lower bound of host - guest
// from the slot's publish time (it was published before now), and the
// largest bound seen is the offset. Its error is the smallest
// publish-to-read delay seen, which the heartbeat makes small; it only
// makes the remaining slice look longer by that much (docs/hints.md).
func (h *HintSource) pageClock(now int64, s *hintpage.Slot) int64 {
	if !h.calibrate.Load() {
		return now
	}
	// The live block's switch-in is a host time before now as well, and
	// usually the newer one.
	obs := int64(min(max(s.PublishNs, s.SwitchInNs), 1<<62)) - now
	off, at := h.offset.Load(), h.offsetAt.Load()
	if at != 0 {
		off -= (now - at) / 1_000_000_000 * offsetDecay
	}
	if at == 0 || obs > off {
		h.offset.Store(obs)
		h.offsetAt.Store(now)
		off = obs
	}
	return now + off
}

// Remaining implements ThresholdSource: the slot's expected slice minus
// the time since its switch-in, or the guest-only estimate when the page
// cannot be used.
func (h *HintSource) Remaining(tid int, now int64) int64 {
	var s hintpage.Slot
	pageNow, ok := h.slot(tid, now, &s)
	if !ok {
		return h.fallback.Remaining(tid, now)
	}
	switch {
	case s.Contention == hintpage.ContFree || s.ExpectedSliceNs == hintpage.Infinite:
		h.used.Add(1)
		return clock.Infinite
	case s.ExpectedSliceNs == 0:
		h.fallbacks[fbUnknown].Add(1)
		return h.fallback.Remaining(tid, now)
	}
	h.used.Add(1)
	// The caller is running, so its CPU was switched in. If the page still
	// says otherwise, the switch-in is not published yet: it happened
	// after the last switch-out, which is the earliest (so the most
	// cautious) start to assume.
	start := s.SwitchInNs
	if s.State != hintpage.StateRunning {
		start = max(s.SwitchInNs, s.SwitchOutNs)
	}
	return max(int64(s.ExpectedSliceNs)-max(pageNow-int64(start), 0), 0)
}

// Contention implements ContentionSource from the slot's run-queue
// contention. Its answers count as used, and its fallbacks by reason, as
// Remaining's do: a policy that blocks at once on a shared CPU asks this
// far more often than how much slice is left.
//
// On a thread's own page (a local target, not a vCPU's), "shared" is
// checked against the fallback source, which reads the same thread's
// accounting: the page says shared after any other task's turn of 100 µs
// in the last 500 ms, which other work on the machine (a build, another
// program's tests) gives most of the time, while the policy's "shared"
// (block at once) is for a CPU that a competitor keeps wanting
// (SchedSignal: run delay, and a CPU that never idles while the thread
// sleeps). Where the fallback says free or throttled, that is the
// answer: under a CPU quota a turn of the page's is no competitor to
// block at once for (docs/BENCHMARKS.md, "Hints as the threshold in the
// NAMD-like bench"). A vCPU's
// page stays as it is: inside a guest, the host's contention shows only
// on the page (and as steal).
func (h *HintSource) Contention(tid int, now int64) Contention {
	var s hintpage.Slot
	if _, ok := h.slot(tid, now, &s); ok {
		if c, known := hintContention(s.Contention); known {
			h.used.Add(1)
			if c == ContentionShared && h.cont != nil && !h.calibrate.Load() {
				if own := h.cont.Contention(tid, now); own == ContentionFree || own == ContentionThrottled {
					return own
				}
			}
			return c
		}
		h.fallbacks[fbUnknown].Add(1)
	}
	if h.cont != nil {
		return h.cont.Contention(tid, now)
	}
	return ContentionUnknown
}

// ObserveRunDelay hands a caller's reading of the thread's run delay to
// the fallback contention source, where that takes one.
func (h *HintSource) ObserveRunDelay(tid int, now int64, rd RunDelay) {
	if o, ok := h.cont.(RunDelayObserver); ok {
		o.ObserveRunDelay(tid, now, rd)
	}
}

// Team implements TeamSource from the fallback contention source, where
// that can tell (a SchedSignal): the page knows the thread's CPU only.
func (h *HintSource) Team(tid int, now int64) (team, known bool) {
	if ts, ok := h.cont.(TeamSource); ok {
		return ts.Team(tid, now)
	}
	return false, true
}

// Mitigation implements MitigationSource: the short EEVDF slice the
// agent's --mitigate gave the calling thread (or, on a vCPU page, the
// vCPU it runs on), ok false when the page cannot be used or says none.
// With one, a blocked waiter's wake-up preempts its co-runner at once.
func (h *HintSource) Mitigation(tid int) (time.Duration, bool) {
	var s hintpage.Slot
	if _, ok := h.slot(tid, clock.Now(), &s); !ok {
		return 0, false
	}
	h.used.Add(1)
	return time.Duration(s.MitigationNs), s.MitigationNs != 0
}

// hintContention maps a slot's contention onto the Syncer's; known is
// false for a slot that does not know yet.
func hintContention(c uint8) (Contention, bool) {
	switch c {
	case hintpage.ContFree:
		return ContentionFree, true
	case hintpage.ContThrottled:
		return ContentionThrottled, true
	case hintpage.ContShared:
		return ContentionShared, true
	}
	return ContentionUnknown, false
}

// Gap and Resumed feed the fallback estimator, so that it is warm when
// the page goes away.
func (h *HintSource) Gap(tid int, start, end int64) { h.fallback.Gap(tid, start, end) }

// Resumed: see Gap.
func (h *HintSource) Resumed(tid int, now int64) { h.fallback.Resumed(tid, now) }

// HintStats counts the calls answered from the page and, by reason, those
// that fell back.
type HintStats struct {
	Used      uint64            `json:"used"`
	Fallbacks map[string]uint64 `json:"fallbacks"`
}

// Stats returns the counters.
func (h *HintSource) Stats() HintStats {
	st := HintStats{Used: h.used.Load(), Fallbacks: map[string]uint64{}}
	for i := range h.fallbacks {
		st.Fallbacks[fbNames[i]] = h.fallbacks[i].Load()
	}
	return st
}

// currentCPU is sched_getcpu(): in a guest, the vCPU the thread runs on.
// The answer may be stale by the time the slot is read (the thread can
// migrate in between); the slot is then another vCPU's, which is as good a
// guess as any while the page is fresh.
func currentCPU() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return -1
	}
	return int(cpu)
}

// CPUContention is what a vCPU page says of CPU cpu of this guest now
// (ok false: no usable vCPU page, or its slot for cpu does not know). The
// OpenMP follower (ompfollow.go) asks it for each CPU the program may run
// on: inside a VM the host's neighbour shows only here, and as steal.
func (h *HintSource) CPUContention(cpu int, now int64) (Contention, bool) {
	if now-h.checked.Load() > reopenEvery {
		h.reopen(now)
	}
	f := h.file.Load()
	if f == nil || f.Header().Flags&hintpage.FlagVCPU == 0 {
		return ContentionUnknown, false
	}
	var s hintpage.Slot
	if err := f.ReadSlot(cpu, &s); err != nil {
		h.fallbacks[reason(err)].Add(1)
		return ContentionUnknown, false
	}
	if err := s.Check(h.pageClock(now, &s), hintMaxAge, hintSkew); err != nil {
		h.fallbacks[reason(err)].Add(1)
		return ContentionUnknown, false
	}
	c, known := hintContention(s.Contention)
	if known {
		h.used.Add(1)
	}
	return c, known
}
