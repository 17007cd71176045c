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

// Event kinds (EV_SWITCH_IN / EV_SWITCH_OUT in sched.bpf.c).
const (
	KindSwitchIn  = 1
	KindSwitchOut = 2
)

var eventSize = int(unsafe.Sizeof(bpf.SchedSwitchEvent{}))

// decodeEvent copies a raw record into ev field by field: the record comes
// from the kernel in host byte order with the C layout bpf2go mirrored.
func decodeEvent(raw []byte, ev *bpf.SchedSwitchEvent) error {
	if len(raw) < eventSize {
		return ErrShortRecord
	}
	le := binary.LittleEndian
	ev.TsNs = le.Uint64(raw[0:])
	ev.IntervalNs = le.Uint64(raw[8:])
	ev.Tid = le.Uint32(raw[16:])
	ev.Tgid = le.Uint32(raw[20:])
	ev.Cpu = le.Uint32(raw[24:])
	ev.OtherTid = le.Uint32(raw[28:])
	ev.OtherTgid = le.Uint32(raw[32:])
	ev.Kind = raw[36]
	ev.Preempted = raw[37]
	for i := range ev.OtherComm {
		ev.OtherComm[i] = int8(raw[40+i])
	}
	return nil
}
