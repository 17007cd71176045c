//go:build linux

package bpfload

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

func TestFindSymbol(t *testing.T) {
	syms := "ffffffff813a4370 t __pfx_finish_task_switch.isra.0\nffffffff813a4380 t finish_task_switch.isra.0\nffffffff813a5000 T schedule\n"
	if s, err := findSymbol(bufio.NewScanner(strings.NewReader(syms)), "finish_task_switch"); err != nil || s != "finish_task_switch.isra.0" {
		t.Fatalf("clone: %q %v", s, err)
	}
	exact := syms + "ffffffff813a6000 T finish_task_switch\n"
	if s, _ := findSymbol(bufio.NewScanner(strings.NewReader(exact)), "finish_task_switch"); s != "finish_task_switch" {
		t.Fatalf("exact: %q", s)
	}
	if _, err := findSymbol(bufio.NewScanner(strings.NewReader("x t other\n")), "finish_task_switch"); err == nil {
		t.Fatal("missing symbol found")
	}
}

// hintProbe loads the real programs with the hint writers; they must load
// on this machine and in CI (x86-64, kprobes, no lockdown).
func hintProbe(t *testing.T) *Probe {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("kernel hint writes are x86-64 only")
	}
	p := loadOrSkip(t, Options{Events: true, HintWrites: true, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if on, _ := p.HintWrites(); !on {
		err := p.HintWritesErr()
		if Refused(err) {
			// Lockdown (integrity or confidentiality) forbids the
			// helper outright: nothing to test here, and the agent
			// falls back to writing every switch-in itself.
			t.Skipf("this kernel refuses bpf_probe_write_user (locked down? dmesg says whether): %v", err)
		}
		t.Fatalf("hint writers not loaded: %v", err)
	}
	return p
}

// hintFile makes a page file of 4 thread slots and maps it with prot.
func hintFile(t *testing.T, prot int) (*hintpage.Writer, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vgpu-probe-hints-t")
	w, err := hintpage.Create(path, 4, 0, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, hintpage.Size(4), prot, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return w, b
}

func liveAddr(b []byte, slot int) uint64 {
	return uint64(uintptr(unsafe.Pointer(&b[0]))) + uint64(hintpage.SlotOffset(slot)+hintpage.LiveOffset)
}

// corunner pins a busy loop to cpu until stopped.
func corunner(t *testing.T, cpu int) func() {
	t.Helper()
	co := exec.Command("sh", "-c", "while :; do :; done")
	if err := co.Start(); err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(co.Process.Pid, &set); err != nil {
		co.Process.Kill()
		co.Wait()
		t.Fatal(err)
	}
	return func() { co.Process.Kill(); co.Wait() }
}

// TestKernelWritesLiveBlock: a thread maps its page (writable, shared),
// its slot's live block is registered, and it switches (sleeps, yields,
// is preempted by a co-runner pinned to its CPU). The live block in the
// mapping must show the switches the BPF programs saw, written by them,
// with no torn read accepted by a concurrent reader.
func TestKernelWritesLiveBlock(t *testing.T) {
	p := hintProbe(t)
	w, b := hintFile(t, unix.PROT_READ|unix.PROT_WRITE)
	page, err := hintpage.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	const slot = 1
	cpu := runtime.NumCPU() - 1

	tidc := make(chan int)
	registered := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		runtime.LockOSThread() // this thread exits with the goroutine
		defer close(finished)
		var set unix.CPUSet
		set.Set(cpu)
		unix.SchedSetaffinity(0, &set)
		tidc <- unix.Gettid()
		<-registered
		_ = b[hintpage.SlotOffset(slot)+hintpage.LiveOffset] // touched: present in this process
		for range 50 {
			time.Sleep(200 * time.Microsecond)
			runtime.Gosched()
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
		stop := corunner(t, cpu)
		for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
		}
		stop()
	}()
	tid := <-tidc
	if err := p.Watch(uint32(tid)); err != nil {
		t.Fatal(err)
	}
	w.PublishEstimate(slot, &hintpage.Slot{TID: uint32(tid), PublishNs: 1, Contention: hintpage.ContShared, SliceNs: 4e6})
	if err := p.SetHintAddr(uint32(tid), liveAddr(b, slot), w.LiveSeq(slot)); err != nil {
		t.Fatal(err)
	}

	// A concurrent reader: every accepted read is one whole write.
	var stop atomic.Bool
	var accepted, torn atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		var s hintpage.Slot
		for !stop.Load() {
			err := page.ReadSlot(slot, &s)
			switch {
			case errors.Is(err, hintpage.ErrTorn):
				torn.Add(1)
				continue
			case err != nil:
				t.Errorf("read: %v", err)
				return
			}
			accepted.Add(1)
			if s.SwitchInNs == 0 {
				continue // not written yet
			}
			ok := s.LiveFlags == hintpage.LiveKernel && s.State >= hintpage.StateRunning &&
				(s.State == hintpage.StateRunning) == (s.SwitchOutNs < s.SwitchInNs)
			if !ok {
				t.Errorf("inconsistent live block accepted: %+v", s)
				return
			}
		}
	})
	close(registered)
	<-finished
	stop.Store(true)
	wg.Wait()

	var h bpf.SchedHintSlot
	if err := p.HintState(uint32(tid), &h); err != nil {
		t.Fatal(err)
	}
	var st bpf.SchedThreadStats
	if err := p.Stats(uint32(tid), &st); err != nil {
		t.Fatal(err)
	}
	var s hintpage.Slot
	if err := page.ReadSlot(slot, &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("writes %d fails %d, switches %d preemptions %d; reads accepted %d torn %d; live %+v",
		h.Writes, h.Fails, st.Switches, st.Preemptions, accepted.Load(), torn.Load(), s)
	if h.Writes < 100 || h.Fails != 0 {
		t.Fatalf("writes %d fails %d: want one per switch, none refused", h.Writes, h.Fails)
	}
	if seq := *(*uint32)(unsafe.Pointer(&b[hintpage.SlotOffset(slot)+hintpage.LiveOffset])); seq%2 != 0 || seq != 2*uint32(h.Writes) || h.Seq != seq {
		t.Fatalf("live seqlock %d (kernel's copy %d) after %d writes", seq, h.Seq, h.Writes)
	}
	// The thread has exited: its last switch was a switch-out.
	if s.State == hintpage.StateRunning || s.SwitchInNs != st.SwitchInNs || s.SwitchOutNs != st.SwitchOutNs || s.CPU != uint16(st.Cpu) {
		t.Fatalf("live block %+v does not match the BPF stats in %d out %d cpu %d", s, st.SwitchInNs, st.SwitchOutNs, st.Cpu)
	}
	if st.Preemptions == 0 {
		t.Fatalf("the co-runner never preempted the thread")
	}
	var lag []uint64
	for i, n := range h.LagHist {
		if n > 0 {
			lag = append(lag, uint64(i))
		}
	}
	if len(lag) == 0 {
		t.Fatal("no switch-in-to-write delay recorded")
	}
}

// TestKernelWriteRefused: a registered address the process never touched
// (not present in its page tables), or one mapped read-only: the writes
// are refused, counted, and reported, and the slot is left alone.
func TestKernelWriteRefused(t *testing.T) {
	p := hintProbe(t)
	for _, c := range []struct {
		name  string
		prot  int
		touch bool
	}{{"not present", unix.PROT_READ | unix.PROT_WRITE, false}, {"read-only", unix.PROT_READ, true}} {
		t.Run(c.name, func(t *testing.T) {
			_, b := hintFile(t, c.prot)
			tidc := make(chan int)
			go_ := make(chan struct{})
			done := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				defer close(done)
				tidc <- unix.Gettid()
				<-go_
				if c.touch {
					_ = b[hintpage.SlotOffset(0)+hintpage.LiveOffset]
				}
				for range 20 {
					time.Sleep(100 * time.Microsecond)
				}
			}()
			tid := <-tidc
			if err := p.Watch(uint32(tid)); err != nil {
				t.Fatal(err)
			}
			addr := liveAddr(b, 0)
			if err := p.SetHintAddr(uint32(tid), addr, 0); err != nil {
				t.Fatal(err)
			}
			close(go_)
			<-done
			var h bpf.SchedHintSlot
			if err := p.HintState(uint32(tid), &h); err != nil {
				t.Fatal(err)
			}
			if h.Fails == 0 || h.Writes != 0 || h.Ok != 0 {
				t.Fatalf("writes %d fails %d ok %d: want every write refused", h.Writes, h.Fails, h.Ok)
			}
			fc := make(chan bpf.SchedHintFault, 1)
			go func() {
				var f bpf.SchedHintFault
				for p.ReadHintFault(&f) == nil {
					if f.Tid == uint32(tid) {
						fc <- f
						return
					}
				}
			}()
			select {
			case f := <-fc:
				if f.Addr != addr || f.Err != -int32(unix.EFAULT) {
					t.Fatalf("fault record %+v, want addr %#x err -EFAULT", f, addr)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("no fault record")
			}
			for _, x := range b[hintpage.SlotOffset(0)+hintpage.LiveOffset : hintpage.SlotOffset(1)] {
				if x != 0 {
					t.Fatal("a refused write changed the slot")
				}
			}
			p.Unwatch(uint32(tid))
		})
	}
}

// TestHintProgramsVerify: the hint programs with their writes stubbed out
// (see stubHintWrites) pass the verifier, attach (the kprobe on this
// kernel's finish_task_switch), and run at each switch-out and switch-in
// of a registered thread and of no other: on any kernel, locked down or
// not.
func TestHintProgramsVerify(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("kernel hint writes are x86-64 only")
	}
	stubHintWrites = true
	defer func() { stubHintWrites = false }()
	p := loadOrSkip(t, Options{Events: true, HintWrites: true, Log: zerolog.New(zerolog.NewTestWriter(t))})
	on, sym := p.HintWrites()
	if err := p.HintWritesErr(); !on && err != nil && strings.Contains(err.Error(), "attaching kprobe/") {
		// Loaded, so the verifier took them; the kernel has no kprobes
		// (CONFIG_KPROBES unset: no "kprobe" in
		// /sys/bus/event_source/devices) to attach the switch-in to.
		t.Skipf("the verifier accepts the hint programs, but this kernel cannot attach a kprobe: %v", err)
	}
	if !on {
		t.Fatalf("hint programs (writes stubbed) not loaded: %v", p.HintWritesErr())
	}
	_, b := hintFile(t, unix.PROT_READ|unix.PROT_WRITE)
	tids := make(chan int, 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- unix.Gettid()
			<-start
			for range 100 {
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	reg, other := <-tids, <-tids
	for _, tid := range []int{reg, other} {
		if err := p.Watch(uint32(tid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetHintAddr(uint32(reg), liveAddr(b, 0), 0); err != nil {
		t.Fatal(err)
	}
	close(start)
	wg.Wait()
	var h bpf.SchedHintSlot
	if err := p.HintState(uint32(reg), &h); err != nil {
		t.Fatal(err)
	}
	var st bpf.SchedThreadStats
	if err := p.Stats(uint32(reg), &st); err != nil {
		t.Fatal(err)
	}
	var lagged uint64
	for _, n := range h.LagHist {
		lagged += n
	}
	t.Logf("kprobe on %s; registered thread: %d switches, %d stubbed writes (%d at switch-in), %d refused", sym, st.Switches, h.Writes, lagged, h.Fails)
	// One write per switch-out and one per switch-in (the first
	// switch-in may precede the registration).
	if h.Fails != 0 || h.Writes+2 < 2*st.Switches || lagged+1 < st.Switches || h.Seq != 2*uint32(h.Writes) {
		t.Fatalf("writes %d (%d at switch-in) seq %d for %d switches", h.Writes, lagged, h.Seq, st.Switches)
	}
	if err := p.HintState(uint32(other), &h); err == nil {
		t.Fatalf("an unregistered thread has hint state %+v", h)
	}
}
