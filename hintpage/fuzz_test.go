package hintpage

import (
	"testing"
	"unsafe"
)

func unsafeBytes(words []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

// FuzzRead: whatever the bytes, the reader returns an error or a slot that
// passed its checks; it never panics.
func FuzzRead(f *testing.F) {
	w, b := newPage(f, 2, FlagVCPU)
	s := slotFor(42)
	w.Publish(0, &s)
	s = slotFor(43)
	s.TID, s.Contention, s.EstFlags = 44, ContThrottled, EstQuotaBound|EstTickPhase
	s.MitigationNs = 100_000
	w.Publish(1, &s)
	f.Add(append([]byte(nil), b...), 1234, 0)
	f.Add(append([]byte(nil), b...), 44, 1)
	f.Add(append([]byte(nil), b[:64]...), 0, 0)
	f.Add([]byte("VGHP"), 1, 1)
	f.Fuzz(func(t *testing.T, data []byte, tid int, i int) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		var s Slot
		for j := range min(p.Slots(), 64) {
			if p.ReadSlot(j, &s) == nil {
				if s.sane() != nil || s.MitigationNs > MaxMitigation {
					t.Fatalf("accepted an insane slot %+v", s)
				}
				if e := s.ExpectedSliceNs; e != Infinite && e > maxSlice || e != s.Expected() {
					t.Fatalf("expected slice %d of an accepted slot %+v", e, s)
				}
				if r := s.Remaining(uint64(i)); r > s.ExpectedSliceNs {
					t.Fatalf("remaining %d above the expected slice %d", r, s.ExpectedSliceNs)
				}
				_ = s.Check(int64(i), 1e9, 1e6)
			}
		}
		_ = p.ReadSlot(i, &s)
		_ = p.FindTID(tid, &s)
	})
}
