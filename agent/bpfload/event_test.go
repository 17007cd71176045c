package bpfload

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// FuzzDecodeEvent: any bytes from the ring buffer either decode or give
// ErrShortRecord; never a panic. A full-size record round-trips its
// fields.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Add(make([]byte, 3))
	f.Add(make([]byte, 80))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ev bpf.SchedSwitchEvent
		err := decodeEvent(raw, &ev)
		if len(raw) < eventSize {
			if !errors.Is(err, ErrShortRecord) {
				t.Fatalf("%d bytes: %v", len(raw), err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.InNs != binary.LittleEndian.Uint64(raw) || ev.Tid != binary.LittleEndian.Uint32(raw[24:]) || ev.Waited != raw[42] {
			t.Fatalf("fields do not match the bytes: %+v", ev)
		}
	})
}
