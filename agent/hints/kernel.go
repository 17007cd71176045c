package hints

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// KernelWriter is the BPF programs' side of the hint pages
// (*bpfload.Probe loaded with HintWrites): they write a thread's live
// block themselves at each of its switches, into the thread's own mapping
// of its page, once the publisher registers that mapping's address.
type KernelWriter interface {
	HintWrites() (bool, string)
	SetHintAddr(tid uint32, addr uint64, seq uint32) error
	ClearHintAddr(tid uint32) error
	ReadHintFault(out *bpf.SchedHintFault) error
}

// scanEvery: threads whose process has no writable shared mapping of
// their page yet (a local reader maps it when its library starts) are
// looked for again every scanEvery refreshes (1 s).
const scanEvery = int(time.Second / RefreshEvery)

// maxFaults: after this many refused writes a thread's live block goes
// back to the publisher (a mapping made read-only, or gone), until a
// later scan finds a usable one again.
const maxFaults = 3

// handOver: after unregistering a thread, the publisher waits this long
// before writing its live block, so that a BPF program still inside a
// write of it (a few µs) is done.
const handOver = 2 * time.Millisecond

// setKernel starts using the BPF writer w, if it writes.
func (p *Publisher) setKernel(w KernelWriter) {
	if on, sym := w.HintWrites(); !on {
		return
	} else {
		p.opts.Log.Info().Str("kprobe", sym).Msg("hint pages: the kernel writes each switch of a hinted thread into its page (bpf_probe_write_user)")
	}
	p.kernel.Store(&kernelRef{w})
	p.scanNow.Store(true)
	go p.readFaults(w)
}

// candidate is a thread whose live block the kernel could write.
type candidate struct {
	tid, slot int
	dev, ino  uint64
}

// scan looks, for every thread whose live block the publisher still
// writes, for a writable shared mapping of its page in its process
// (/proc/TID/maps, matched by device and inode), faults the slot in, and
// registers its address with the BPF programs. /proc is read outside mu.
func (p *Publisher) scan() {
	k := p.kernel.Load()
	if k == nil {
		return
	}
	p.mu.Lock()
	var cands []candidate
	for tid, t := range p.threads {
		if t.kernelLive() {
			continue
		}
		dev, ino := t.page.w.DevIno()
		if ino == 0 {
			continue
		}
		cands = append(cands, candidate{int(tid), t.slot, dev, ino})
	}
	p.mu.Unlock()
	for _, c := range cands {
		off := uint64(hintpage.SlotOffset(c.slot) + hintpage.LiveOffset)
		addr, err := findMapping(c.tid, c.dev, c.ino, off)
		if err != nil || addr == 0 {
			continue
		}
		if faultIn(c.tid, addr) != nil {
			continue
		}
		p.mu.Lock()
		if t := p.threads[uint32(c.tid)]; t != nil && t.slot == c.slot && !t.kernelLive() {
			if err := k.SetHintAddr(uint32(c.tid), addr, t.page.w.LiveSeq(t.slot)); err == nil {
				t.addr, t.faults = addr, 0
				p.kernelThreads++
			} else {
				p.opts.Log.Debug().Err(err).Int("tid", c.tid).Msg("hint pages: registering a slot")
			}
		}
		p.mu.Unlock()
	}
}

// readFaults handles the writes the BPF programs could not make: the page
// not present in the process (never touched), read-only, or gone.
func (p *Publisher) readFaults(w KernelWriter) {
	var f bpf.SchedHintFault
	for {
		err := w.ReadHintFault(&f)
		if errors.Is(err, ringbuf.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond) // a bad record: never spin
			continue
		}
		p.fault(w, &f)
	}
}

func (p *Publisher) fault(w KernelWriter, f *bpf.SchedHintFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faultEvents++
	t := p.threads[f.Tid]
	if t == nil || t.addr != f.Addr {
		return
	}
	t.faults++
	// Not present in the process's page tables (nothing there touched it
	// yet): reading it through the process brings it in, writable.
	if t.faults < maxFaults && faultIn(int(f.Tid), f.Addr) == nil {
		return
	}
	if err := w.ClearHintAddr(f.Tid); err != nil {
		p.opts.Log.Debug().Err(err).Uint32("tid", f.Tid).Msg("hint pages: unregistering a slot")
		return
	}
	t.addr = 0
	t.userAfter = monoNow() + uint64(handOver)
	p.opts.Log.Debug().Uint32("tid", f.Tid).Int32("err", f.Err).Msg("hint pages: the kernel cannot write this slot; the agent writes it")
}

// KernelStats returns how many threads had their live block handed to the
// BPF programs, how many are now, and how many fault records came.
func (p *Publisher) KernelStats() (registered, now, faults int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.threads {
		if t.kernelLive() {
			now++
		}
	}
	return p.kernelThreads, now, p.faultEvents
}

// findMapping returns the user address, in the process of thread tid, of
// byte off of the file dev:ino, from a mapping of it that is readable,
// writable and shared (0 when there is none).
func findMapping(tid int, dev, ino, off uint64) (uint64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(tid) + "/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 || fs[4] != strconv.FormatUint(ino, 10) || fs[3] != want {
			continue
		}
		if perms := fs[1]; len(perms) < 4 || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's' {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		foff, err3 := strconv.ParseUint(fs[2], 16, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || off < foff || off+hintpage.LiveOffset > foff+(end-start) {
			continue
		}
		return start + (off - foff), nil
	}
	return 0, sc.Err()
}

// faultIn reads the live block at addr through the process of tid, which
// maps it into that process's page tables (a shared writable mapping of
// the page file is mapped writable on a read fault), so that the BPF
// programs' writes, which cannot fault, find it.
func faultIn(tid int, addr uint64) error {
	tgid, err := tgidOf(tid)
	if err != nil {
		return err
	}
	var buf [hintpage.LiveOffset]byte
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(tgid, local, remote, 0)
	if err != nil {
		return fmt.Errorf("faulting the hint slot in, in process %d: %w", tgid, err)
	}
	if n != len(buf) {
		return fmt.Errorf("faulting the hint slot in, in process %d: read %d bytes", tgid, n)
	}
	return nil
}

func tgidOf(tid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Tgid in /proc/%d/status", tid)
}
