//go:build linux

package bpfload

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// With a wake-up asked for per record, the reader is woken for the
// switch-ins of a contended thread only: a sleeper alone on its CPU wakes
// nobody (its hint has no slice to end), two spinners sharing one CPU do;
// only at a switch-in after an involuntary switch-out, and at most once a
// millisecond per thread: a spinner that a thread with a short slice
// preempts for 150 µs every 350 µs switches in more often than that.
// A record's Woken is what the programs did (BPF_RB_FORCE_WAKEUP). With
// Self set to this process, its own threads preempting each other are not
// contention, and the spinners wake nobody.
func TestWakeOnlyWhenContended(t *testing.T) {
	for _, self := range []uint32{0, uint32(os.Getpid())} {
		t.Run(fmt.Sprintf("self=%d", self), func(t *testing.T) { wakeOnlyWhenContended(t, self) })
	}
}

func wakeOnlyWhenContended(t *testing.T, self uint32) {
	p := loadOrSkip(t, Options{Events: true, WakeEveryEvent: true, Self: self, Log: zerolog.Nop()})
	cpu := runtime.NumCPU() - 1

	// Runs each body on a thread pinned to cpu, all watched before they
	// start.
	run := func(bodies ...func()) []uint32 {
		threads := newPinned(t, cpu)
		var tids []uint32
		for _, body := range bodies {
			tid := threads.spawn(body)
			if err := p.Watch(tid); err != nil {
				t.Fatal(err)
			}
			tids = append(tids, tid)
		}
		threads.run()
		return tids
	}
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	sleeper := run(func() {
		for range 200 {
			unix.Nanosleep(&unix.Timespec{Nsec: 500_000}, nil)
		}
	})
	spinners := run(func() { spin(300 * time.Millisecond) }, func() { spin(300 * time.Millisecond) })
	// The preempter's short slice lets its wake-ups preempt the spinner
	// at once (EEVDF), not after the spinner's slice.
	var sliceErr error
	run(func() { spin(300 * time.Millisecond) }, func() {
		if sliceErr = shortSlice(100_000); sliceErr != nil {
			return
		}
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			unix.Nanosleep(&unix.Timespec{Nsec: 200_000}, nil)
			spin(150 * time.Microsecond)
		}
	})

	// The rule, replayed on the records (all on one CPU, so in order):
	// woken only at a switch-in after an involuntary switch-out that
	// does not end an interruption under 100 µs, within 500 ms of the
	// end of an involuntary interval of 100 µs or more (by another
	// process than self, when set), and 1 ms or more after the thread's
	// last switch-in that woke the reader. On a loaded machine the
	// sleeper too may be preempted; then its next records may wake the
	// reader.
	woken, events, wrong := map[uint32]int{}, map[uint32]int{}, 0
	contended, lastWoken := map[uint32]uint64{}, map[uint32]uint64{}
	limited := 0 // records of contended threads within 1 ms of their last wake-up
	bySelf := 0  // preemptions of 100 µs or more by this process, with self set
	done := readEvents(p, func(ev *bpf.SchedSwitchEvent) {
		quiet := ev.Preempted != 0 && ev.OffNs > 0 && ev.OffNs < 100_000
		if ev.Preempted != 0 && ev.OffNs >= 100_000 {
			if self != 0 && ev.OtherTgid == self {
				bySelf++
			} else {
				contended[ev.Tid] = ev.InNs
			}
		}
		c := contended[ev.Tid]
		want := ev.Preempted != 0 && !quiet && c != 0 && ev.InNs-c < 500_000_000
		if last, ok := lastWoken[ev.Tid]; want && ok && ev.InNs-last < 1_000_000 {
			want = false
			limited++
		}
		events[ev.Tid]++
		if ev.Woken != 0 {
			woken[ev.Tid]++
			lastWoken[ev.Tid] = ev.InNs
		}
		if want != (ev.Woken != 0) {
			wrong++
		}
	})
	time.Sleep(300 * time.Millisecond) // the reader drains every 100 ms
	p.Close()
	<-done
	t.Logf("sleeper: %d of %d records woke the reader; spinners: %d of %d, %d of %d; %d within 1 ms of a wake-up",
		woken[sleeper[0]], events[sleeper[0]], woken[spinners[0]], events[spinners[0]], woken[spinners[1]], events[spinners[1]], limited)
	if wrong != 0 {
		t.Errorf("%d records woke the reader against the rule", wrong)
	}
	if events[sleeper[0]] < 100 {
		t.Errorf("sleeper: %d records, want ~200", events[sleeper[0]])
	}
	switch {
	case self == 0 && woken[spinners[0]]+woken[spinners[1]] == 0:
		t.Errorf("two spinners on one CPU (%d and %d records): none woke the reader", events[spinners[0]], events[spinners[1]])
	case self == 0 && sliceErr == nil && limited == 0:
		t.Errorf("a spinner preempted every ~0.35 ms: no switch-in within 1 ms of a wake-up")
	case self != 0 && bySelf == 0:
		t.Errorf("two spinners of this process on one CPU: no record of one preempted by the other")
	}
	if sliceErr != nil {
		t.Skipf("the once-a-millisecond limit is unchecked: %v", sliceErr)
	}
}

// shortSlice gives the calling thread an EEVDF slice of ns.
func shortSlice(ns uint64) error {
	a, err := unix.SchedGetAttr(0, 0)
	if err == nil {
		a.Runtime, a.Flags, a.Deadline, a.Period = ns, 0, 0, 0
		err = unix.SchedSetAttr(0, a, 0)
	}
	if err != nil {
		return fmt.Errorf("custom EEVDF slices not available here (Linux 6.12+): %w", err)
	}
	return nil
}
