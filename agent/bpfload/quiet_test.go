//go:build linux

package bpfload

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// TestHintedRecordsTeach: a thread with a live block in a target's array
// sends ring records only for the intervals the hint estimator learns from
// (teaches in bpf/sched.bpf.c): its voluntary sleeps send none, its
// preemptions by another task (a co-runner pinned to its CPU; on a busy
// machine, whatever else runs there too) do. A watched thread without a
// live block still sends one record per switch-in.
func TestHintedRecordsTeach(t *testing.T) { inEachMode(t, hintedRecordsTeach) }

func hintedRecordsTeach(t *testing.T, p *Probe) {
	a, err := p.NewHintArray(4)
	if err != nil {
		t.Fatalf("NewHintArray: %v", err)
	}
	defer p.RemoveHintArray(a)
	cpu := runtime.NumCPU() - 1

	threads := newPinned(t, cpu)
	sleep := func() {
		for range 200 {
			unix.Nanosleep(&unix.Timespec{Nsec: 500_000}, nil)
		}
	}
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	var boundary uint64 // the hinted thread's end of sleeps
	coStart := make(chan struct{})
	hinted := threads.spawn(func() {
		sleep()
		boundary = monoNow()
		close(coStart)
		spin(400 * time.Millisecond)
	})
	plain := threads.spawn(sleep)
	threads.spawn(func() { // the co-runner
		<-coStart
		spin(400 * time.Millisecond)
	})
	for _, tid := range []uint32{hinted, plain} {
		if err := p.Watch(tid); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetHintSlot(hinted, a.ID, 1); err != nil {
		t.Fatal(err)
	}
	hs0 := stableStats(t, p, hinted) // it waits for run: no switch

	type rec struct {
		in, off, run      uint64
		preempted, thrott bool
		other             uint32
	}
	recs := map[uint32][]rec{}
	done := readEvents(p, func(ev *bpf.SchedSwitchEvent) {
		recs[ev.Tid] = append(recs[ev.Tid], rec{ev.InNs, ev.OffNs, ev.RunNs, ev.Preempted != 0, ev.Throttled != 0, ev.OtherTgid})
	})
	threads.run()
	time.Sleep(300 * time.Millisecond) // the reader drains every 100 ms
	var hs, ps bpf.SchedThreadStats
	if err := p.Stats(hinted, &hs); err != nil {
		t.Fatal(err)
	}
	if err := p.Stats(plain, &ps); err != nil {
		t.Fatal(err)
	}
	reg, err := p.HintSlot(hinted)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.ClearHintSlot(hinted)
	p.Close()
	<-done

	var asleep, spinning, byOther int
	for _, r := range recs[hinted] {
		// The rule (learn() in agent/hints): a known interval that ended
		// a throttle, a preemption to the idle task, or a preemption of
		// 100 µs or more by another task.
		if r.off == 0 || !(r.thrott || r.preempted && (r.other == 0 || r.off >= 100_000)) {
			t.Errorf("hinted thread: record of an interval nothing learns from: %+v", r)
		}
		if r.in <= boundary {
			asleep++
		} else {
			spinning++
			if r.preempted && r.other != 0 {
				byOther++
			}
		}
	}
	t.Logf("hinted: %d switch-ins, %d switch-outs (%d preemptions), %d blocks written, %d records (%d while sleeping, %d while spinning beside the co-runner, %d of them preemptions by another task); plain: %d switch-ins, %d records",
		hs.Switches, hs.SwitchOuts, hs.Preemptions, reg.Writes, len(recs[hinted]), asleep, spinning, byOther, ps.Switches, len(recs[plain]))
	// A write at each switch the programs saw since registration, in and
	// out (a switch the programs were inside at the first count may fall
	// on either side of it; the thread has ended by the last).
	seen, written := events(&hs)-events(&hs0), reg.Writes-hs0.HintWrites
	if hs.Switches < 150 || written+1 < seen || written > seen+1 {
		t.Errorf("hinted thread: %d switches seen (%d in), %d blocks written: its live block was not written at each switch", seen, hs.Switches, written)
	}
	// Its sleeps (200 of them) send nothing; a busy machine may preempt
	// it meanwhile, and those records are due.
	if asleep > int(hs.Preemptions) || asleep > 20 {
		t.Errorf("hinted thread: %d records while it slept 200 times (%d preemptions in all)", asleep, hs.Preemptions)
	}
	if byOther < 2 {
		t.Errorf("hinted thread: %d records of preemptions by another task while it spun beside a co-runner, want several", byOther)
	}
	// The thread without a live block: one record per switch-in, as before.
	if ps.Switches < 150 || uint64(len(recs[plain])) != ps.Switches {
		t.Errorf("plain thread: %d records for %d switch-ins", len(recs[plain]), ps.Switches)
	}
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
