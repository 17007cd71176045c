package hybridsync

import "sync/atomic"

// estimatorThreads bounds the per-thread tables: more host threads than
// this calling Sync is far beyond NAMD's or GROMACS's one per GPU per rank.
const estimatorThreads = 256

// threadSlots keeps per-thread state in a fixed table, found without locks:
// a slot is claimed once by CAS on its thread id. Past the table's size,
// threads share one overflow slot, whose state is then blurred by several
// writers instead of memory growing. The zero value is ready to use.
type threadSlots[T any] struct {
	tids     [estimatorThreads]atomic.Int64
	slots    [estimatorThreads]T
	overflow T
}

func (s *threadSlots[T]) get(tid int) *T {
	h := uint64(tid) * 0x9E3779B97F4A7C15 >> 56 // top 8 bits: 0..255
	for i := uint64(0); i < estimatorThreads; i++ {
		j := (h + i) % estimatorThreads
		cur := s.tids[j].Load()
		if cur == int64(tid) || (cur == 0 && s.tids[j].CompareAndSwap(0, int64(tid))) || s.tids[j].Load() == int64(tid) {
			return &s.slots[j]
		}
	}
	return &s.overflow
}

// each calls f on every slot, claimed or not, and the overflow slot.
func (s *threadSlots[T]) each(f func(*T)) {
	for i := range s.slots {
		f(&s.slots[i])
	}
	f(&s.overflow)
}
