package hintpage

import (
	"sync/atomic"
	"unsafe"
)

// mem is the page's bytes, shared with another process that writes them
// concurrently. Every access is atomic at its natural width, so a reader
// sees each field either before or after a write, and the seqlock (read
// before and after the fields) tells whether the slot changed in between.
// The bytes must be 8-byte aligned (mmap gives page alignment; aligned()
// copies anything else).
type mem []byte

func (m mem) ptr(off int) unsafe.Pointer { return unsafe.Pointer(&m[off]) }

func (m mem) u32(off int) uint32 { return atomic.LoadUint32((*uint32)(m.ptr(off))) }
func (m mem) u64(off int) uint64 { return atomic.LoadUint64((*uint64)(m.ptr(off))) }

// u16 fields share a 32-bit word with their neighbours (the header's
// offsets 4..10): they are read through the aligned word that holds them.
// The slots' u8/u16 fields are read as their whole word.
func (m mem) u16(off int) uint16 { return uint16(m.u32(off&^3) >> (8 * (off & 3))) }

func (m mem) setU32(off int, v uint32) { atomic.StoreUint32((*uint32)(m.ptr(off)), v) }
func (m mem) setU64(off int, v uint64) { atomic.StoreUint64((*uint64)(m.ptr(off)), v) }
func (m mem) addU32(off int, d uint32) { atomic.AddUint32((*uint32)(m.ptr(off)), d) }

// aligned returns b itself when it is 8-byte aligned, else an aligned copy
// (fuzz inputs and test buffers are not always aligned).
func aligned(b []byte) mem {
	if len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%8 == 0 {
		return mem(b)
	}
	words := make([]uint64, (len(b)+7)/8)
	c := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(b))
	copy(c, b)
	return mem(c)
}
