//go:build linux

package bpfload

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// How ReadEvent waits for records.
//
// The programs wake a waiting reader (BPF_RB_FORCE_WAKEUP) for the
// switch-ins of contended threads without a live array (with
// WakeEveryEvent), and for anyone once wakeBytes are queued. Waiting for
// that wake-up means blocking in epoll_wait, and a goroutine blocked in a
// system call keeps its P: the Go runtime's sysmon cannot go to its deep
// sleep while a P is held, polls every 20 µs to 10 ms until it takes the
// P back (after 10 ms), and then starts over at 20 µs. Each such wait of
// the reader cost ~50 sysmon wake-ups, half of the agent's CPU time at
// ten waits a second.
//
// With WakeEveryEvent, while every watched thread has its live block in
// an array, no record asks for a wake-up and the records are few (only
// those the hint estimator learns from). The reader then sleeps on a Go
// timer, which parks it without a P, and drains what is queued without
// blocking: DrainEvery, shorter when records come fast enough to fill
// wakeBytes before (the kernel's own wake-up would have come then). As
// soon as a thread the programs may wake the reader for is watched, the
// sleep ends and the reader waits in epoll_wait again. Without
// WakeEveryEvent every switch-in sends a record, and a burst after a quiet
// spell is better met by the kernel's wake-up at wakeBytes: the reader
// keeps waiting in epoll_wait.

// wakeBytes is WAKEUP_BYTES in sched.bpf.c.
const wakeBytes = 256 << 10

// minSleep bounds how often the timed reader wakes when records come fast.
const minSleep = time.Millisecond

// wakeWatch counts the watched threads the programs may wake the reader
// for: those without a live array (a hint slot). Watch, Unwatch and the
// hint slot calls keep it; they come from different goroutines.
type wakeWatch struct {
	mu       sync.Mutex
	watched  map[uint32]bool // watched tids
	hinted   map[uint32]bool // tids with a hint slot, watched or not yet
	unhinted int             // watched tids without a hint slot
	// prompt is signalled when unhinted becomes non-zero, to end a timed
	// sleep of the reader.
	prompt chan struct{}
}

func newWakeWatch() *wakeWatch {
	return &wakeWatch{watched: map[uint32]bool{}, hinted: map[uint32]bool{}, prompt: make(chan struct{}, 1)}
}

func (w *wakeWatch) watch(tid uint32, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, was := w.watched[tid]
	switch {
	case on && !was:
		w.watched[tid] = true
		if !w.hinted[tid] {
			w.add(1)
		}
	case !on && was:
		delete(w.watched, tid)
		if !w.hinted[tid] {
			w.add(-1)
		}
	}
}

func (w *wakeWatch) hint(tid uint32, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hinted[tid] == on {
		return
	}
	if on {
		w.hinted[tid] = true
	} else {
		delete(w.hinted, tid)
	}
	if _, ok := w.watched[tid]; ok {
		if on {
			w.add(-1)
		} else {
			w.add(1)
		}
	}
}

// add must be called with mu held.
func (w *wakeWatch) add(n int) {
	w.unhinted += n
	if n > 0 && w.unhinted == n {
		select {
		case w.prompt <- struct{}{}:
		default:
		}
	}
}

func (w *wakeWatch) any() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unhinted > 0
}

// promptWake reports whether the reader waits in epoll_wait for the
// programs to wake it, rather than on a timer (above).
func (p *Probe) promptWake() bool {
	return p.config.Wakeup == 0 || p.wake.any()
}

// idle is called by ReadEvent once everything queued was read: it waits
// until there may be more, then lets the next ReadInto return it.
func (p *Probe) idle() error {
	now := time.Now()
	got, since := p.drained, now.Sub(p.lastIdle)
	p.drained, p.lastIdle = 0, now
	for !p.promptWake() {
		sleep := p.drain
		// At the rate the last records came, the ring would hold
		// wakeBytes after fill: the kernel would wake the reader then.
		if got > 0 && since > 0 {
			fill := time.Duration(float64(since) * wakeBytes / float64(got))
			sleep = max(minSleep, min(sleep, fill))
		}
		if p.timer == nil {
			p.timer = time.NewTimer(sleep)
		} else {
			p.timer.Reset(sleep)
		}
		select {
		case <-p.timer.C:
		case <-p.wake.prompt:
			p.timer.Stop()
		case <-p.closed:
			p.timer.Stop()
			return fmt.Errorf("reading ring buffer: %w", ringbuf.ErrClosed)
		}
		if p.queued() {
			// A deadline in the past: ReadInto returns what is
			// queued, then ErrDeadlineExceeded, without blocking.
			p.reader.SetDeadline(time.Now())
			return nil
		}
		// Nothing came: no system call, and the same sleep again.
		got, since = 0, 0
		p.lastIdle = time.Now()
	}
	p.reader.SetDeadline(time.Now().Add(p.drain))
	return nil
}

// queued reports whether records wait in the ring, without a system
// call. The ring's memory goes with Close: closeMu keeps it mapped while
// this reads it.
func (p *Probe) queued() bool {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	select {
	case <-p.closed:
		return true // ReadInto says it is closed
	default:
	}
	return p.reader.AvailableBytes() > 0
}

// ringbufHeader is the kernel's header before each record.
const ringbufHeader = 8
