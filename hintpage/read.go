package hintpage

import "fmt"

// Page is a validated view of a hint page. Its header is checked once, at
// Parse; slots are read lock-free, each validated on its own.
type Page struct {
	m   mem
	hdr Header
}

// Parse checks the header of b and returns a reader over it. b may be
// modified concurrently by the publisher (it is usually an mmap of the
// page file); it must stay mapped while the Page is used.
func Parse(b []byte) (*Page, error) {
	if !littleEndian {
		return nil, fmt.Errorf("hint page: big-endian machines are not supported")
	}
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, header needs %d", ErrSize, len(b), HeaderSize)
	}
	m := aligned(b)
	if got := m.u32(offMagic); got != Magic {
		return nil, fmt.Errorf("%w: %#x", ErrMagic, got)
	}
	if v := m.u16(offVersion); v != Version {
		return nil, fmt.Errorf("%w: %d (this reader knows %d)", ErrVersion, v, Version)
	}
	if hs, ss := m.u16(offHeaderSize), m.u16(offSlotSize); hs != HeaderSize || ss != SlotSize {
		return nil, fmt.Errorf("%w: header %d slot %d bytes, want %d and %d", ErrSize, hs, ss, HeaderSize, SlotSize)
	}
	h := Header{
		Slots:       int(m.u32(offSlots)),
		Clock:       m.u32(offClock),
		Flags:       m.u32(offFlags),
		ClockOffset: int64(m.u64(offClockOff)),
		TotalSize:   int(m.u32(offTotalSize)),
	}
	if h.Slots < 0 || h.Slots > MaxSlots || h.TotalSize != Size(h.Slots) || len(b) < h.TotalSize {
		return nil, fmt.Errorf("%w: %d slots, %d bytes declared, %d mapped", ErrSize, h.Slots, h.TotalSize, len(b))
	}
	if h.Clock != ClockMonotonic {
		return nil, fmt.Errorf("%w: clock id %d", ErrVersion, h.Clock)
	}
	return &Page{m: m[:h.TotalSize], hdr: h}, nil
}

// Header returns the header as parsed.
func (p *Page) Header() Header { return p.hdr }

// Heartbeat returns when the publisher last refreshed any slot.
func (p *Page) Heartbeat() uint64 { return p.m.u64(offHeartbeat) }

// Slots is the number of slots.
func (p *Page) Slots() int { return p.hdr.Slots }

// ReadSlot reads slot i into out: its estimate block under the estimate
// seqlock, then its live block under the live seqlock, and derives
// out.ExpectedSliceNs from both. ErrTorn when a writer was inside either
// block, ErrAbsurd when the values cannot be true. It does not judge
// freshness: see Check.
func (p *Page) ReadSlot(i int, out *Slot) error {
	if i < 0 || i >= p.hdr.Slots {
		return ErrNoSlot
	}
	b := HeaderSize + i*SlotSize
	m := p.m
	s1 := m.u32(b + offSeq)
	if s1&1 != 0 {
		return ErrTorn
	}
	out.TID = m.u32(b + offTID)
	out.SliceNs = m.u64(b + offSlice)
	out.PublishNs = m.u64(b + offPublish)
	out.QuotaUS = m.u32(b + offQuota)
	out.PeriodUS = m.u32(b + offPeriod)
	w := m.u32(b + offCont)
	out.Contention, out.EstFlags = uint8(w), uint8(w>>8)
	out.TickNs = m.u32(b + offTick)
	out.TickPhaseNs = m.u32(b + offPhase)
	out.MitigationNs = m.u32(b + offMitigation)
	out.QuotaRunNs = m.u64(b + offQuotaRun)
	if m.u32(b+offSeq) != s1 {
		return ErrTorn
	}
	l1 := m.u32(b + offLiveSeq)
	if l1&1 != 0 {
		return ErrTorn
	}
	w = m.u32(b + offState)
	out.State, out.LiveFlags, out.CPU = uint8(w), uint8(w>>8), uint16(w>>16)
	out.SwitchInNs = m.u64(b + offSwitchIn)
	out.SwitchOutNs = m.u64(b + offSwitchOut)
	out.QuotaEndNs = m.u64(b + offQuotaEnd)
	if m.u32(b+offLiveSeq) != l1 {
		return ErrTorn
	}
	out.ExpectedSliceNs = out.Expected()
	return out.sane()
}

// Expected derives, from both blocks, how long the run that began at
// SwitchInNs is expected to last: Infinite when the thread has its CPU to
// itself; else the shorter of the learnt slice (shared) and, when the
// estimate says the quota binds it, the time from the switch-in to when
// the quota runs out (the live block's QuotaEndNs put on the tick at the
// throttles' phase; without it QuotaRunNs); 0 when
// neither is known.
func (s *Slot) Expected() uint64 {
	if s.Contention == ContFree || s.SliceNs == Infinite {
		return Infinite
	}
	exp, known := uint64(0), false
	if s.Contention == ContShared && s.SliceNs != 0 {
		exp, known = s.SliceNs, true
	}
	if s.EstFlags&EstQuotaBound != 0 {
		if q, ok := s.quotaRun(); ok && (!known || q < exp) {
			exp, known = q, true
		}
	}
	if !known {
		return 0
	}
	return max(min(exp, maxSlice), 1)
}

func (s *Slot) quotaRun() (uint64, bool) {
	if s.State == StateRunning && s.QuotaEndNs != 0 && s.QuotaEndNs >= s.SwitchInNs {
		end := s.QuotaEndNs
		if s.EstFlags&EstTickPhase != 0 && s.TickNs != 0 {
			end = NextTick(end, uint64(s.TickNs), uint64(s.TickPhaseNs))
		}
		return end - s.SwitchInNs, true
	}
	if s.QuotaRunNs != 0 {
		return s.QuotaRunNs, true
	}
	return 0, false
}

// Remaining is what is left at now (page clock) of the expected run: for
// a running slot, ExpectedSliceNs - (now - SwitchInNs); off its CPU, the
// whole expected run. Infinite stays Infinite.
func (s *Slot) Remaining(now uint64) uint64 {
	e := s.ExpectedSliceNs
	if e == Infinite || s.State != StateRunning || now <= s.SwitchInNs {
		return e
	}
	return e - min(e, now-s.SwitchInNs)
}

// NextTick returns the first time >= t at the given phase of the tick.
func NextTick(t, tick, phase uint64) uint64 {
	if tick == 0 {
		return t
	}
	base := t - t%tick + phase
	if base < t {
		base += tick
	}
	return base
}

// FindTID reads the slot of thread tid (thread pages only).
func (p *Page) FindTID(tid int, out *Slot) error {
	if p.hdr.Flags&FlagVCPU != 0 || tid <= 0 {
		return ErrNoSlot
	}
	for i := 0; i < p.hdr.Slots; i++ {
		// The tid is read outside the seqlock to find the slot; ReadSlot
		// then reads it again consistently with the rest.
		if p.m.u32(HeaderSize+i*SlotSize+offTID) != uint32(tid) {
			continue
		}
		if err := p.ReadSlot(i, out); err != nil {
			return err
		}
		if out.TID != uint32(tid) {
			return ErrTorn // the slot was reassigned meanwhile
		}
		return nil
	}
	return ErrNoSlot
}

// maxSlice: a slice or quota beyond this is not a scheduler's (CFS and
// EEVDF slices are milliseconds; cgroup periods are at most 1 s).
const maxSlice = uint64(10e9)

// MaxMitigation bounds a mitigation slice: EEVDF takes a requested
// slice of 0.1-100 ms (sched_setattr's sched_runtime).
const MaxMitigation = 100_000_000

// maxTick bounds a tick (HZ >= 24).
const maxTick = 1_000_000_000 / 24

// sane rejects what no publisher writes: unknown enums or flags, no
// publish time, a finite slice or quota run beyond maxSlice, a quota
// without a period (a quota above the period is legal: it spans several
// CPUs), a tick phase outside the tick, a quota end before the switch-in
// or more than 2 maxSlice after it, a mitigation slice over MaxMitigation.
func (s *Slot) sane() error {
	switch {
	case s.State > StateSleeping, s.Contention > ContShared, s.EstFlags&^estKnown != 0, s.LiveFlags&^liveKnown != 0:
		return fmt.Errorf("%w: state %d contention %d flags %#x %#x", ErrAbsurd, s.State, s.Contention, s.EstFlags, s.LiveFlags)
	case s.PublishNs == 0:
		return fmt.Errorf("%w: never published", ErrAbsurd)
	case s.SliceNs != Infinite && s.SliceNs > maxSlice, s.QuotaRunNs > maxSlice:
		return fmt.Errorf("%w: slice %d quota run %d", ErrAbsurd, s.SliceNs, s.QuotaRunNs)
	case (s.QuotaUS == 0) != (s.PeriodUS == 0), uint64(s.PeriodUS)*1000 > maxSlice:
		return fmt.Errorf("%w: quota %d period %d", ErrAbsurd, s.QuotaUS, s.PeriodUS)
	case s.TickNs > maxTick, s.EstFlags&EstTickPhase != 0 && s.TickPhaseNs >= s.TickNs:
		return fmt.Errorf("%w: tick %d phase %d", ErrAbsurd, s.TickNs, s.TickPhaseNs)
	case s.MitigationNs > MaxMitigation:
		return fmt.Errorf("%w: mitigation slice %d ns", ErrAbsurd, s.MitigationNs)
	case s.QuotaEndNs != 0 && (s.QuotaEndNs < s.SwitchInNs || s.QuotaEndNs-s.SwitchInNs > 2*maxSlice):
		return fmt.Errorf("%w: quota end %d switch-in %d", ErrAbsurd, s.QuotaEndNs, s.SwitchInNs)
	}
	return nil
}

// Check tells whether a slot read at now (page clock, ns) is fresh: its
// estimate's publish time is at most maxAge old, and neither it nor the
// live block's switch-in is in the future beyond the clock error the
// reader allows (skew).
func (s *Slot) Check(now int64, maxAge, skew int64) error {
	pub := int64(min(s.PublishNs, 1<<62))
	in := int64(min(s.SwitchInNs, 1<<62))
	switch {
	case pub-skew > now:
		return fmt.Errorf("%w: published %d ns in the future", ErrAbsurd, pub-now)
	case in-skew > now:
		return fmt.Errorf("%w: switched in %d ns in the future", ErrAbsurd, in-now)
	case now-pub > maxAge:
		return fmt.Errorf("%w: %d ms old", ErrStale, (now-pub)/1e6)
	}
	return nil
}
