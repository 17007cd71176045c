//go:build linux

package bpfload

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// wakeWatch counts the watched threads without a hint slot, whatever the
// order of Watch and SetHintSlot, and signals when the first appears.
func TestWakeWatch(t *testing.T) {
	w := newWakeWatch()
	signalled := func() bool {
		select {
		case <-w.prompt:
			return true
		default:
			return false
		}
	}
	w.hint(1, true) // the slot before the watch (the publisher is first)
	w.watch(1, true)
	if w.any() || signalled() {
		t.Fatal("a hinted thread counts as one the reader may be woken for")
	}
	w.watch(2, true)
	if !w.any() || !signalled() {
		t.Fatal("an unhinted thread: no prompt wake-up")
	}
	w.watch(2, true) // again: no double count
	w.hint(2, true)
	if w.any() {
		t.Fatal("both hinted: still prompt")
	}
	w.hint(1, false)
	if !w.any() || !signalled() {
		t.Fatal("a cleared slot of a watched thread: no prompt wake-up")
	}
	w.watch(1, false)
	w.hint(3, false)
	w.watch(3, false)
	if w.any() || w.unhinted != 0 {
		t.Fatalf("all unhinted threads unwatched: %d left", w.unhinted)
	}
}

// While every watched thread has a live array the reader sleeps on a
// timer (DrainEvery, here far longer than the test waits); a contended
// thread without one, watched meanwhile, ends that sleep: its records that
// ask for a wake-up are read within milliseconds of its switch-ins, as
// before.
func TestTimedReaderWakesForUnhinted(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("live arrays are x86-64 only")
	}
	const drain = 10 * time.Second
	p := loadOrSkip(t, Options{Events: true, WakeEveryEvent: true, DrainEvery: drain, Log: zerolog.Nop()})
	a, err := p.NewHintArray(4)
	if err != nil {
		t.Fatalf("NewHintArray: %v", err)
	}
	defer p.RemoveHintArray(a)
	cpu := runtime.NumCPU() - 1

	type seen struct {
		woken bool
		lag   time.Duration
	}
	got := make(chan seen, 1<<16)
	done := readEvents(p, func(ev *bpf.SchedSwitchEvent) {
		got <- seen{ev.Woken != 0, time.Duration(monoNow() - ev.InNs)}
	})

	// A hinted sleeper: nothing to wake the reader for.
	hinted := newPinned(t, cpu)
	tid := hinted.spawn(func() { time.Sleep(200 * time.Millisecond) })
	if err := p.SetHintSlot(tid, a.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Watch(tid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the reader goes to its timed sleep
	if p.promptWake() {
		t.Fatal("only a hinted thread watched, yet the reader waits for wake-ups")
	}

	// Two spinners sharing the CPU, watched without a live array.
	spinners := newPinned(t, cpu)
	for range 2 {
		tid := spinners.spawn(func() {
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			}
		})
		if err := p.Watch(tid); err != nil {
			t.Fatal(err)
		}
	}
	go hinted.run()
	spinners.run()
	time.Sleep(20 * time.Millisecond)
	p.Close()
	<-done
	close(got)
	var lags []time.Duration
	for s := range got {
		if s.woken {
			lags = append(lags, s.lag)
		}
	}
	if len(lags) == 0 {
		t.Fatal("two spinners sharing a CPU: no record woke the reader")
	}
	slices.Sort(lags)
	med := lags[len(lags)/2]
	t.Logf("%d records woke the reader; switch-in to read: median %v, max %v", len(lags), med, lags[len(lags)-1])
	// The reader is an ordinary thread here, sharing the machine with the
	// spinners: milliseconds, not the seconds of its timed sleep.
	if med > 50*time.Millisecond {
		t.Errorf("records that asked for a wake-up were read %v after the switch-in (median): the reader slept on", med)
	}
}
