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

// ReadSlot reads slot i under its seqlock into out: ErrTorn when the
// publisher was writing it, ErrAbsurd when the values cannot be true.
// It does not judge freshness: see Check.
func (p *Page) ReadSlot(i int, out *Slot) error {
	if i < 0 || i >= p.hdr.Slots {
		return ErrNoSlot
	}
	b := HeaderSize + i*SlotSize
	s1 := p.m.u32(b + offSeq)
	if s1&1 != 0 {
		return ErrTorn
	}
	out.TID = p.m.u32(b + offTID)
	out.SwitchInNs = p.m.u64(b + offSwitchIn)
	out.SwitchOutNs = p.m.u64(b + offSwitchOut)
	out.ExpectedSliceNs = p.m.u64(b + offExpected)
	out.RemainingNs = p.m.u64(b + offRemaining)
	out.PublishNs = p.m.u64(b + offPublish)
	out.QuotaUS = p.m.u32(b + offQuota)
	out.PeriodUS = p.m.u32(b + offPeriod)
	out.State = p.m.u8(b + offState)
	out.Contention = p.m.u8(b + offCont)
	out.CPU = p.m.u16(b + offCPU)
	if p.m.u32(b+offSeq) != s1 {
		return ErrTorn
	}
	return out.sane()
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

// sane rejects what no publisher writes: unknown enums, a switch-in after
// the publish time, a finite slice or remaining time beyond maxSlice, a
// remaining time above the slice, a quota without a period (a quota above
// the period is legal: it spans several CPUs).
func (s *Slot) sane() error {
	switch {
	case s.State > StateSleeping, s.Contention > ContShared:
		return fmt.Errorf("%w: state %d contention %d", ErrAbsurd, s.State, s.Contention)
	case s.PublishNs == 0, s.SwitchInNs > s.PublishNs:
		return fmt.Errorf("%w: switch-in %d publish %d", ErrAbsurd, s.SwitchInNs, s.PublishNs)
	case s.ExpectedSliceNs != Infinite && s.ExpectedSliceNs > maxSlice,
		s.RemainingNs != Infinite && (s.RemainingNs > maxSlice || s.RemainingNs > s.ExpectedSliceNs):
		return fmt.Errorf("%w: slice %d remaining %d", ErrAbsurd, s.ExpectedSliceNs, s.RemainingNs)
	case (s.QuotaUS == 0) != (s.PeriodUS == 0), uint64(s.PeriodUS)*1000 > maxSlice:
		return fmt.Errorf("%w: quota %d period %d", ErrAbsurd, s.QuotaUS, s.PeriodUS)
	}
	return nil
}

// Check tells whether a slot read at now (page clock, ns) is fresh: its
// publish time is at most maxAge old and not in the future beyond the
// clock error the reader allows (skew).
func (s *Slot) Check(now int64, maxAge, skew int64) error {
	pub := int64(min(s.PublishNs, 1<<62))
	switch {
	case pub-skew > now:
		return fmt.Errorf("%w: published %d ns in the future", ErrAbsurd, pub-now)
	case now-pub > maxAge:
		return fmt.Errorf("%w: %d ms old", ErrStale, (now-pub)/1e6)
	}
	return nil
}
