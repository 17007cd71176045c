package bpfload

import (
	"encoding/binary"
	"errors"
	"unsafe"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// ErrShortRecord is returned for a ring buffer record smaller than a
// switch event; the reader skips it.
var ErrShortRecord = errors.New("ring buffer record shorter than a switch event")

var eventSize = int(unsafe.Sizeof(bpf.SchedSwitchEvent{}))

// decodeEvent copies a raw record into ev field by field: the record comes
// from the kernel in host byte order (little-endian: the object is built
// for bpfel) with the C layout bpf2go mirrored; TestEventLayout pins the
// offsets.
func decodeEvent(raw []byte, ev *bpf.SchedSwitchEvent) error {
	if len(raw) < eventSize {
		return ErrShortRecord
	}
	le := binary.LittleEndian
	ev.InNs = le.Uint64(raw[0:])
	ev.OffNs = le.Uint64(raw[8:])
	ev.RunNs = le.Uint64(raw[16:])
	ev.Tid = le.Uint32(raw[24:])
	ev.Tgid = le.Uint32(raw[28:])
	ev.Cpu = le.Uint32(raw[32:])
	ev.OtherTgid = le.Uint32(raw[36:])
	ev.Preempted = raw[40]
	ev.Throttled = raw[41]
	ev.Waited = raw[42]
	ev.Woken = raw[43]
	for i := range ev.OtherComm {
		ev.OtherComm[i] = int8(raw[48+i])
	}
	return nil
}
