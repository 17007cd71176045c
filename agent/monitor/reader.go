package monitor

import (
	"cmp"
	"runtime"
	"sync"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// procsMu serializes the readers' changes of GOMAXPROCS (a read, then a
// write).
var procsMu sync.Mutex

// addProc adds one P to GOMAXPROCS for a real-time reader, or takes it
// back (n = -1). The reader runs Go code, which needs a P: after a wait
// in the kernel longer than 10 ms the runtime hands its P to others, and
// it must find one free when it wakes. If every P is held by goroutines
// whose ordinary threads wait for a CPU, it waits with them, for
// milliseconds on a loaded host; one more P than the agent has otherwise
// is, in practice, free for it.
func addProc(n int) {
	procsMu.Lock()
	defer procsMu.Unlock()
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + n)
}

// realtimeReader makes the calling goroutine's thread the real-time event
// reader (see readEvents) and returns what keeps it off the CPUs of the
// threads it reports. The caller calls done when the reader stops.
func realtimeReader(prio int, log zerolog.Logger) (pl *placement, done func()) {
	// Never unlocked: when the goroutine returns the runtime ends the
	// thread, so no other goroutine ever runs at this priority. New
	// runtime threads are not cloned from a locked thread, and the
	// reset-on-fork flag covers any other child.
	runtime.LockOSThread()
	prio = cmp.Or(prio, DefaultReaderPriority)
	attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Flags: unix.SCHED_FLAG_RESET_ON_FORK, Priority: uint32(prio)}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		log.Debug().Err(err).Int("priority", prio).Msg("event reader stays an ordinary thread: cannot make it real-time")
		return nil, func() {}
	}
	addProc(1)
	done = func() { addProc(-1) }
	pl = &placement{pinned: -1, log: log}
	if unix.SchedGetaffinity(0, &pl.allowed) != nil {
		return nil, done
	}
	return pl, done
}

// placement keeps the reader on the CPU where it least often finds itself
// preempting the thread whose switch-in it reports. A real-time task wakes
// on the CPU it last ran on and preempts whatever ordinary task runs there
// at once: left on a watched thread's CPU, it would take that CPU from the
// thread at every one of its switch-ins. Each such event counts against
// its CPU; at most once per minMoveGap the reader moves to the CPU with
// the fewest, and every hitsHalfLife the counts are halved, so that a CPU
// that has turned quiet is found again. Moving at each event instead kept
// it circling where watched threads ran on every CPU, spending much of a
// core in sched_setaffinity (docs/tried.md: "Waking the reader for every
// switch-in").
type placement struct {
	allowed unix.CPUSet
	pinned  int // the one CPU it was moved to, -1 before: no getcpu needed
	hits    map[int]uint64
	moved   int64 // CLOCK_MONOTONIC ns of the last move
	decayed int64 // and of the last halving of hits
	log     zerolog.Logger
}

const (
	minMoveGap   = 100_000_000
	hitsHalfLife = 10_000_000_000
)

// after is called on the reader's thread after each event.
func (p *placement) after(ev *bpf.SchedSwitchEvent) {
	cpu := p.pinned
	if cpu < 0 {
		var ok bool
		if cpu, ok = getcpu(); !ok {
			return
		}
	}
	if cpu != int(ev.Cpu) {
		return
	}
	to, move := p.move(cpu, monotonicNs())
	if !move {
		return
	}
	var set unix.CPUSet
	set.Set(to)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		p.log.Debug().Err(err).Msg("moving the event reader")
		return
	}
	p.pinned = to
}

// move counts an event on cpu at now and returns the CPU the reader
// should move to, or false to stay.
func (p *placement) move(cpu int, now int64) (int, bool) {
	if p.hits == nil {
		p.hits = map[int]uint64{}
	}
	if now-p.decayed >= hitsHalfLife {
		for c := range p.hits {
			p.hits[c] /= 2
		}
		p.decayed = now
	}
	p.hits[cpu]++
	if p.moved != 0 && now-p.moved < minMoveGap {
		return 0, false
	}
	best := cpu
	for c := range len(p.allowed) * 64 {
		if p.allowed.IsSet(c) && p.hits[c] < p.hits[best] {
			best = c
		}
	}
	if best == cpu {
		return 0, false
	}
	p.moved = now
	return best, true
}

func monotonicNs() int64 { return int64(bpfload.MonoNow()) }

// getcpu is the CPU the calling thread runs on.
func getcpu() (int, bool) {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return 0, false
	}
	return int(cpu), true
}
