//go:build linux

package bpfload

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// ErrHintArch: the live arrays rely on x86-64's store order (the BPF
// programs' seqlock has no barriers): elsewhere the agent writes the live
// blocks into the page itself, as for VMs.
var ErrHintArch = errors.New("live blocks in a BPF map need x86-64 (its store order); the agent writes them into the page")

// HintArray is one target's live-block array (docs/hints.md "Live blocks
// in a BPF map"): a memory-mappable BPF array with one 64-byte block per
// slot of the target's page, which the programs write at every switch of
// the threads registered to it (SetHintSlot). Only this target's threads
// are ever registered to it.
type HintArray struct {
	ID    uint32 // its key in hint_maps
	Slots int
	m     *ebpf.Map
}

// FD returns a new descriptor of the array (the caller closes it): what
// a target's process gets to map it. The array is frozen: through any
// descriptor it can only be mapped read-only, and bpf() cannot write it;
// only the programs write it.
func (a *HintArray) FD() (int, error) {
	if a.m == nil {
		return -1, errors.New("hint array removed")
	}
	fd, err := unix.FcntlInt(uintptr(a.m.FD()), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1, fmt.Errorf("duplicating the hint array descriptor: %w", err)
	}
	return fd, nil
}

// NewHintArray creates a live-block array of slots blocks, zeroed, and
// makes it known to the programs (no thread is registered to it yet).
func (p *Probe) NewHintArray(slots int) (*HintArray, error) {
	if runtime.GOARCH != "amd64" {
		return nil, ErrHintArch
	}
	if p.hintSpec == nil {
		return nil, errors.New("hint arrays not loaded")
	}
	if slots <= 0 || slots > hintpage.MaxLiveSlots {
		return nil, fmt.Errorf("hint array of %d slots", slots)
	}
	spec := p.hintSpec.Copy()
	spec.Name = "hint_live"
	spec.MaxEntries = uint32(slots)
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("creating hint array: %w", err)
	}
	// Frozen before anyone maps it: user space can never write it (no
	// writable mapping, no bpf() update), the programs still can.
	if err := m.Freeze(); err != nil {
		m.Close()
		return nil, fmt.Errorf("freezing hint array: %w", err)
	}
	p.hintMu.Lock()
	p.hintNext++
	id := p.hintNext
	p.hintMu.Unlock()
	if err := p.maps.HintMaps.Update(id, m, ebpf.UpdateNoExist); err != nil {
		m.Close()
		return nil, fmt.Errorf("registering hint array: %w", err)
	}
	return &HintArray{ID: id, Slots: slots, m: m}, nil
}

// RemoveHintArray unregisters a and closes the agent's hold on it; the
// threads registered to it must be cleared first. Processes that mapped it
// keep their mapping (nothing writes it any more).
func (p *Probe) RemoveHintArray(a *HintArray) error {
	if a == nil || a.m == nil {
		return nil
	}
	err := p.maps.HintMaps.Delete(a.ID)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		err = nil
	}
	err = errors.Join(err, a.m.Close())
	a.m = nil
	return err
}

// SetHintSlot makes the programs write tid's live block into block slot
// of array id at each of its switches, from its next switch on.
func (p *Probe) SetHintSlot(tid, id, slot uint32) error {
	v := bpf.SchedHintSlot{Target: id, Slot: slot}
	if err := p.maps.HintSlots.Update(tid, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("registering the hint slot of tid %d: %w", tid, err)
	}
	if err := p.hintsChanged(); err != nil {
		return err
	}
	p.wake.hint(tid, true)
	return nil
}

// ClearHintSlot stops the programs writing tid's live block from its next
// switch on; a program already inside a write finishes it (within
// microseconds).
func (p *Probe) ClearHintSlot(tid uint32) error {
	if err := p.maps.HintSlots.Delete(tid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregistering the hint slot of tid %d: %w", tid, err)
	}
	if err := p.hintsChanged(); err != nil {
		return err
	}
	p.wake.hint(tid, false)
	return nil
}

// hintsChanged tells the programs that hint_slots changed: they keep a
// copy of each thread's registration in its counters and read it again
// when the generation moves (hint_block_of in sched.bpf.c). Written after
// the change, so a program that sees the new generation sees the change.
func (p *Probe) hintsChanged() error {
	err := p.updateConfig(func(c *bpf.SchedTraceConfig) {
		if c.HintGen++; c.HintGen == 0 {
			c.HintGen = 1 // 0 is what new counters hold
		}
	})
	if err != nil {
		return fmt.Errorf("publishing a hint slot change: %w", err)
	}
	return nil
}

// HintReg is a thread's registration for live blocks.
type HintReg struct {
	Target, Slot uint32 // its array (HintArray.ID) and block
	Writes       uint64 // live blocks the programs wrote for it since it was watched
}

// HintSlot reads tid's registration and how many live blocks the programs
// wrote for it.
func (p *Probe) HintSlot(tid uint32) (HintReg, error) {
	var v bpf.SchedHintSlot
	if err := p.maps.HintSlots.Lookup(tid, &v); err != nil {
		return HintReg{}, fmt.Errorf("reading the hint slot of tid %d: %w", tid, err)
	}
	var st bpf.SchedThreadStats
	if err := p.Stats(tid, &st); err != nil {
		return HintReg{}, err
	}
	return HintReg{Target: v.Target, Slot: v.Slot, Writes: st.HintWrites}, nil
}
