package hints

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// fakeKernel stands for the BPF hint writers: it records what the
// publisher registers.
type fakeKernel struct {
	mu   sync.Mutex
	regs map[uint32][2]uint64 // tid -> addr, seq
}

func (f *fakeKernel) Stats(uint32, *bpf.SchedThreadStats) error { return errors.New("no counters") }
func (f *fakeKernel) HintWrites() (bool, string)                { return true, "finish_task_switch" }
func (f *fakeKernel) SetHintAddr(tid uint32, addr uint64, seq uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.regs[tid] = [2]uint64{addr, uint64(seq)}
	return nil
}
func (f *fakeKernel) ClearHintAddr(tid uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.regs, tid)
	return nil
}
func (f *fakeKernel) ReadHintFault(*bpf.SchedHintFault) error { return ringbuf.ErrClosed }
func (f *fakeKernel) reg(tid uint32) ([2]uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.regs[tid]
	return r, ok
}

// TestKernelRegistration: the publisher finds the writable shared mapping
// of a thread's page in its process (by device and inode, not by name),
// hands its slot's live block to the BPF writer (and then writes only the
// estimate block), and takes the block back after repeated refused
// writes.
func TestKernelRegistration(t *testing.T) {
	p := newPublisher(t)
	k := &fakeKernel{regs: map[uint32][2]uint64{}}
	p.SetCounters(k)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	p.Apply(added(targets.KindPID, "self", tid))

	// The publisher's own mapping is in this process too (not so for a
	// real target): this test maps the page read-only, and writable
	// through another name, and checks only that a writable one is
	// picked.
	path := p.Path("self")
	link := filepath.Join(t.TempDir(), "other-name")
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	mapIt := func(name string, prot int) []byte {
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := unix.Mmap(int(f.Fd()), 0, hintpage.Size(threadPageSlots), prot, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}
	ro := mapIt(path, unix.PROT_READ)
	b := mapIt(link, unix.PROT_READ|unix.PROT_WRITE)
	base := func(m []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&m[0]))) }
	page, err := hintpage.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	slot := -1
	var s hintpage.Slot
	for i := range page.Slots() {
		if page.ReadSlot(i, &s) == nil && s.TID == uint32(tid) {
			slot = i
		}
	}
	if slot < 0 {
		t.Fatal("no slot for the thread")
	}
	p.scan()
	r, ok := k.reg(uint32(tid))
	off := uint64(hintpage.SlotOffset(slot) + hintpage.LiveOffset)
	if !ok || r[0]-off == base(ro) || (r[0]-off)%4096 != 0 {
		t.Fatalf("registered %#x (%v): want the live block (offset %d) in a writable mapping, not in the read-only one at %#x", r[0], ok, off, base(ro))
	}
	if r[0]-off != base(b) {
		t.Logf("registered the publisher's own mapping %#x (this test's is %#x)", r[0]-off, base(b))
	}
	want := r[0]
	liveSeq := func() uint32 { return *(*uint32)(unsafe.Pointer(&b[hintpage.SlotOffset(slot)+hintpage.LiveOffset])) }
	if uint32(r[1]) != liveSeq() {
		t.Fatalf("seq handed over %d, page has %d", r[1], liveSeq())
	}
	// Registered: events and refreshes leave the live block alone.
	seq0 := liveSeq()
	now := monoNow()
	p.OnEvent(&bpf.SchedSwitchEvent{InNs: now - 1000, OffNs: 4_000_000, RunNs: 4_000_000, Tid: uint32(tid), Preempted: 1, OtherTgid: 99, Woken: 1})
	p.refresh()
	if liveSeq() != seq0 {
		t.Fatalf("the publisher wrote a live block the kernel owns (seq %d -> %d)", seq0, liveSeq())
	}
	if err := page.ReadSlot(slot, &s); err != nil || s.Contention != hintpage.ContShared || s.SliceNs != 4_000_000 {
		t.Fatalf("estimate block not published: %v %+v", err, s)
	}
	if reg, cur, _ := p.KernelStats(); reg != 1 || cur != 1 {
		t.Fatalf("kernel stats %d %d", reg, cur)
	}

	// Refused writes: the first ones fault the page in; after maxFaults
	// the block goes back to the publisher, after the hand-over delay.
	for range maxFaults {
		p.fault(k, &bpf.SchedHintFault{Addr: want, Tid: uint32(tid), Err: -int32(unix.EFAULT)})
	}
	if _, ok := k.reg(uint32(tid)); ok {
		t.Fatal("still registered after repeated refused writes")
	}
	time.Sleep(handOver + time.Millisecond)
	p.OnEvent(&bpf.SchedSwitchEvent{InNs: monoNow(), OffNs: 4_000_000, RunNs: 4_000_000, Tid: uint32(tid), Preempted: 1, OtherTgid: 99, Woken: 1})
	if liveSeq() == seq0 {
		t.Fatal("the publisher did not take the live block back")
	}
	if err := page.ReadSlot(slot, &s); err != nil || s.State != hintpage.StateRunning || s.LiveFlags != 0 {
		t.Fatalf("live block after hand-back: %v %+v", err, s)
	}
	// A later scan registers it again.
	p.scan()
	if _, ok := k.reg(uint32(tid)); !ok {
		t.Fatal("not registered again")
	}
	// A thread that leaves is unregistered.
	p.Apply(added(targets.KindPID, "self", tid+1_000_000))
	if _, ok := k.reg(uint32(tid)); ok {
		t.Fatal("a thread that left is still registered")
	}
}

func TestFindMappingNone(t *testing.T) {
	if a, err := findMapping(os.Getpid(), 1, 1, 0); a != 0 || err != nil {
		t.Fatalf("no such file mapped: %#x %v", a, err)
	}
}
