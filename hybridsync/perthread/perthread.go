// Package perthread keeps per-thread state in fixed tables found without
// locks: the per-thread tables of hybridsync and its signals.
package perthread

import "sync/atomic"

// Size bounds the per-thread tables: more host threads than
// this calling Sync is far beyond NAMD's or GROMACS's one per GPU per rank.
const Size = 256

// Slots keeps per-thread state in a fixed table, found without locks:
// a slot is claimed once by CAS on its thread id. Past the table's size,
// threads share one overflow slot, whose state is then blurred by several
// writers instead of memory growing. The zero value is ready to use.
type Slots[T any] struct {
	tids     [Size]atomic.Int64
	slots    [Size]T
	overflow T
}

func (s *Slots[T]) Get(tid int) *T {
	h := uint64(tid) * 0x9E3779B97F4A7C15 >> 56 // top 8 bits: 0..255
	for i := uint64(0); i < Size; i++ {
		j := (h + i) % Size
		cur := s.tids[j].Load()
		if cur == int64(tid) || (cur == 0 && s.tids[j].CompareAndSwap(0, int64(tid))) || s.tids[j].Load() == int64(tid) {
			return &s.slots[j]
		}
	}
	return &s.overflow
}

// Each calls f on every slot, claimed or not, and the overflow slot.
func (s *Slots[T]) Each(f func(*T)) {
	for i := range s.slots {
		f(&s.slots[i])
	}
	f(&s.overflow)
}
