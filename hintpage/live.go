package hintpage

import (
	"encoding/binary"
	"fmt"
)

var le = binary.LittleEndian

// Live blocks in a BPF map (docs/hints.md "Live blocks in a BPF map").
// For a local target the agent's BPF programs write each thread's live
// block at its switches into a memory-mappable BPF array that belongs to
// the target; the target's processes map it read-only. Block i of the
// array belongs to slot i of the page and has the layout of a page slot's
// live block, plus the tid of the thread that wrote it:
//
//	0  u32 seq        (seqlock, odd while being written)
//	4  u8  state, 5 u8 flags, 6 u16 CPU (one 32-bit word)
//	8  u64 switch-in, 16 u64 switch-out, 24 u64 quota end
//	32 u32 tid        (the thread whose switch wrote it)
//	36..63 reserved
const (
	// LiveBlockSize is the size of one block of a live array.
	LiveBlockSize = 64
	offBlockTID   = 32
	// MaxLiveSlots bounds the live arrays a reader accepts (as MaxSlots).
	MaxLiveSlots = MaxSlots
)

// ArraySize is the size of the mapping of a live array of n blocks (the
// kernel maps whole pages).
func ArraySize(n int) int {
	return (n*LiveBlockSize + PageAlign - 1) / PageAlign * PageAlign
}

// LiveArray reads the live blocks of a mapped live array.
type LiveArray struct {
	m mem
	n int
}

// ParseLiveArray wraps the mapping b of a live array of n blocks.
func ParseLiveArray(b []byte, n int) (*LiveArray, error) {
	if !littleEndian {
		return nil, ErrVersion
	}
	if n <= 0 || n > MaxLiveSlots || len(b) < n*LiveBlockSize {
		return nil, fmt.Errorf("%w: live array of %d blocks in %d bytes", ErrSize, n, len(b))
	}
	m := aligned(b)
	if m == nil {
		return nil, ErrSize
	}
	return &LiveArray{m: m, n: n}, nil
}

// Slots returns the number of blocks.
func (a *LiveArray) Slots() int { return a.n }

// ReadLive reads block i into out's live fields under its seqlock and
// derives out.ExpectedSliceNs (out's estimate fields must be read first,
// from the page). ErrTorn while a writer is inside the block; ErrNoSlot
// when the block was last written for another thread than tid (a slot
// given to a new thread that has not switched since).
func (a *LiveArray) ReadLive(i int, tid uint32, out *Slot) error {
	if i < 0 || i >= a.n {
		return ErrNoSlot
	}
	b := i * LiveBlockSize
	m := a.m
	l1 := m.u32(b)
	if l1&1 != 0 {
		return ErrTorn
	}
	w := m.u32(b + 4)
	st, fl, cpu := uint8(w), uint8(w>>8), uint16(w>>16)
	in, out2, qe := m.u64(b+8), m.u64(b+16), m.u64(b+24)
	owner := m.u32(b + offBlockTID)
	if m.u32(b) != l1 {
		return ErrTorn
	}
	if owner != tid || l1 == 0 {
		return ErrNoSlot
	}
	out.State, out.LiveFlags, out.CPU = st, fl, cpu
	out.SwitchInNs, out.SwitchOutNs, out.QuotaEndNs = in, out2, qe
	out.ExpectedSliceNs = out.Expected()
	return out.sane()
}

// The socket a local target's processes get their live array from
// (docs/hints.md "The socket"): the page's path + SockSuffix, a unix
// stream socket of the page's owner, mode 0600. The agent checks the
// peer's credentials, sends one LiveMsgSize-byte message with the array's
// descriptor (SCM_RIGHTS) and keeps the connection: while it is open, the
// peer process's threads have their live blocks in the array only.
const (
	SockSuffix     = ".sock"
	LiveMsgMagic   = 0x4c484756 // "VGHL"
	LiveMsgVersion = 1
	LiveMsgSize    = 24
)

// LiveMsg is the message that comes with the array's descriptor.
type LiveMsg struct {
	Slots   uint32 // blocks in the array (= the page's slot count)
	PageIno uint64 // inode of the page the array belongs to
}

// Encode renders m: u32 magic, u16 version, u16 block size, u32 slots,
// u32 reserved, u64 page inode, little-endian.
func (m LiveMsg) Encode() []byte {
	b := make([]byte, LiveMsgSize)
	le.PutUint32(b[0:], LiveMsgMagic)
	le.PutUint16(b[4:], LiveMsgVersion)
	le.PutUint16(b[6:], LiveBlockSize)
	le.PutUint32(b[8:], m.Slots)
	le.PutUint64(b[16:], m.PageIno)
	return b
}

// DecodeLiveMsg parses a message; any other version, block size or an
// absurd slot count is an error.
func DecodeLiveMsg(b []byte) (LiveMsg, error) {
	if len(b) != LiveMsgSize || le.Uint32(b[0:]) != LiveMsgMagic {
		return LiveMsg{}, ErrMagic
	}
	if le.Uint16(b[4:]) != LiveMsgVersion || le.Uint16(b[6:]) != LiveBlockSize {
		return LiveMsg{}, ErrVersion
	}
	m := LiveMsg{Slots: le.Uint32(b[8:]), PageIno: le.Uint64(b[16:])}
	if m.Slots == 0 || m.Slots > MaxLiveSlots {
		return LiveMsg{}, ErrSize
	}
	return m, nil
}
