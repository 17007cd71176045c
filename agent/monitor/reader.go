package monitor

import (
	"cmp"
	"runtime"
	"sync"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// extraProcs counts the Ps the real-time readers added to GOMAXPROCS.
var extraProcs struct {
	sync.Mutex
	n int
}

// addProc adds one P to GOMAXPROCS for a real-time reader, or takes it
// back (n = -1). The reader runs Go code, which needs a P: after a wait
// in the kernel longer than 10 ms the runtime hands its P to others, and
// it must find one free when it wakes. If every P is held by goroutines
// whose ordinary threads wait for a CPU, it waits with them, for
// milliseconds on a loaded host; one more P than the agent has otherwise
// is, in practice, free for it.
func addProc(n int) {
	extraProcs.Lock()
	defer extraProcs.Unlock()
	extraProcs.n += n
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
	pl = &placement{log: log}
	if unix.SchedGetaffinity(0, &pl.allowed) != nil {
		return nil, done
	}
	return pl, done
}

// placement moves the reader off a CPU where it found itself preempting
// the thread whose switch-in it reports. A real-time task wakes on the CPU
// it last ran on and preempts whatever ordinary task runs there at once:
// once there, it would take that CPU from the thread at every one of its
// switch-ins. The CPUs it left stay avoided. Where watched threads run on
// every CPU it may use, it stays where it is: moving on from each CPU in
// turn cost more than it saved (two threads of one target on the two CPUs
// of a small VM kept the reader migrating 4000 times a second, 20% of a
// core in sched_setaffinity alone).
type placement struct {
	allowed, avoid unix.CPUSet
	log            zerolog.Logger
}

// after is called on the reader's thread after each event.
func (p *placement) after(ev *bpf.SchedSwitchEvent) {
	cpu, ok := getcpu()
	if !ok || cpu != int(ev.Cpu) {
		return
	}
	set, move := p.move(cpu)
	if !move {
		return
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		p.log.Debug().Err(err).Msg("moving the event reader")
	}
}

// move returns where the reader goes after it preempted a watched thread
// on cpu: the allowed CPUs not yet avoided, or false to stay.
func (p *placement) move(cpu int) (unix.CPUSet, bool) {
	if p.avoid.IsSet(cpu) {
		return unix.CPUSet{}, false // it came back here: every CPU is avoided
	}
	p.avoid.Set(cpu)
	set := p.without()
	return set, set.Count() > 0
}

func (p *placement) without() unix.CPUSet {
	set := p.allowed
	for i := range len(set) * 64 {
		if p.avoid.IsSet(i) {
			set.Clear(i)
		}
	}
	return set
}

// getcpu is the CPU the calling thread runs on.
func getcpu() (int, bool) {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return 0, false
	}
	return int(cpu), true
}
