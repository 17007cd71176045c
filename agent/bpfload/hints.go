//go:build linux

package bpfload

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// switchInSymbol is the kernel function the switch-in half of the hint
// writer probes: it runs on the thread's CPU after the switch, with the
// thread current and its address space loaded.
const switchInSymbol = "finish_task_switch"

// hintWritesPossible returns the symbol the switch-in kprobe attaches to,
// or why the hint writers cannot run here.
func hintWritesPossible() (string, error) {
	if runtime.GOARCH != "amd64" {
		// The live block's seqlock relies on x86-64's store order.
		return "", fmt.Errorf("kernel hint writes need x86-64, this is %s", runtime.GOARCH)
	}
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return "", fmt.Errorf("reading kernel symbols: %w", err)
	}
	defer f.Close()
	return findSymbol(bufio.NewScanner(f), switchInSymbol)
}

// findSymbol finds name, or a compiler clone of it (name.isra.0,
// name.constprop.0, ...), among the kallsyms lines of sc.
func findSymbol(sc *bufio.Scanner, name string) (string, error) {
	clone := ""
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || (fs[1] != "t" && fs[1] != "T") {
			continue
		}
		switch sym := fs[2]; {
		case sym == name:
			return sym, nil
		case clone == "" && strings.HasPrefix(sym, name+"."):
			clone = sym
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading kernel symbols: %w", err)
	}
	if clone == "" {
		return "", fmt.Errorf("kernel symbol %s not found in /proc/kallsyms", name)
	}
	return clone, nil
}

// HintWrites tells whether the programs write hint pages themselves
// (Options.HintWrites, and the kernel took them), and the kprobe's
// symbol.
func (p *Probe) HintWrites() (bool, string) { return p.kprobe != nil, p.kprobeSym }

// stubHintWrites (tests only) replaces every bpf_probe_write_user call of
// the programs with "r0 = 0" (a write that succeeds and writes nothing):
// the verifier then checks everything else about the hint programs, and
// the kprobe attaches and runs, on kernels whose lockdown refuses the
// helper itself.
var stubHintWrites bool

func stubWrites(spec *ebpf.CollectionSpec) {
	for _, ps := range spec.Programs {
		for i, ins := range ps.Instructions {
			if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnProbeWriteUser) {
				ni := asm.Mov.Imm(asm.R0, 0)
				ni.Metadata = ins.Metadata
				ps.Instructions[i] = ni
			}
		}
	}
}

// HintWritesErr is why the hint writers were not loaded (nil when they
// were, or were not asked for).
func (p *Probe) HintWritesErr() error { return p.hintErr }

// Refused tells whether err says the kernel refuses
// bpf_probe_write_user itself: a kernel locked down (integrity mode
// forbids the helper), as opposed to a verifier rejection of the
// programs.
func Refused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "cannot use helper bpf_probe_write_user")
}

// SetHintAddr makes the programs write the live block of tid's slot at
// addr, a user address in tid's own process (the slot's live block in
// its mapping of the page: writable, shared), continuing its seqlock from
// seq (even). From then on nothing else may write that block.
func (p *Probe) SetHintAddr(tid uint32, addr uint64, seq uint32) error {
	if p.kprobe == nil {
		return errors.New("hint writes not loaded")
	}
	v := bpf.SchedHintSlot{Addr: addr, Seq: seq &^ 1}
	if err := p.maps.HintSlots.Update(tid, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("registering the hint slot of tid %d: %w", tid, err)
	}
	return nil
}

// ClearHintAddr stops the programs writing tid's slot. A program already
// inside a write finishes it (within microseconds).
func (p *Probe) ClearHintAddr(tid uint32) error {
	if p.kprobe == nil {
		return nil
	}
	if err := p.maps.HintSlots.Delete(tid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregistering the hint slot of tid %d: %w", tid, err)
	}
	return nil
}

// HintState reads the write counters of tid's slot.
func (p *Probe) HintState(tid uint32, out *bpf.SchedHintSlot) error {
	if p.kprobe == nil {
		return errors.New("hint writes not loaded")
	}
	if err := p.maps.HintSlots.Lookup(tid, out); err != nil {
		return fmt.Errorf("reading the hint slot of tid %d: %w", tid, err)
	}
	return nil
}

// ReadHintFault blocks until the programs report a refused write (at most
// one per thread per 100 ms); it returns an error wrapping
// ringbuf.ErrClosed once the probe is closed, or at once without hint
// writes.
func (p *Probe) ReadHintFault(out *bpf.SchedHintFault) error {
	if p.faults == nil {
		return fmt.Errorf("hint writes not loaded: %w", ringbuf.ErrClosed)
	}
	rec, err := p.faults.Read()
	if err != nil {
		return fmt.Errorf("reading hint faults: %w", err)
	}
	raw := rec.RawSample
	if len(raw) < 24 {
		return ErrShortRecord
	}
	le := binary.LittleEndian
	out.Addr = le.Uint64(raw[0:])
	out.Tid = le.Uint32(raw[8:])
	out.Tgid = le.Uint32(raw[12:])
	out.Err = int32(le.Uint32(raw[16:]))
	out.At = le.Uint32(raw[20:])
	return nil
}
