package signal_test

import (
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
)

// TestSchedSignalTeam: the team verdict against real threads. A thread of
// this process spinning on another CPU that a busy loop (another process)
// shares is a team, as an OpenMP worker at its barrier is; the same thread
// sleeping between short runs of work (an OpenMP team with a short spin, or
// passive) is not, nor is a spinner on the waiter's own CPU, which gains
// from the waiter's blocks.
func TestSchedSignalTeam(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for i := range 1024 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		t.Skip("needs two CPUs: a team spins on CPUs other than the waiter's")
	}
	waiter, other := cpus[len(cpus)-1], cpus[len(cpus)-2]
	for _, c := range []struct {
		name string
		cpu  int    // the other thread's, and the busy loop's
		step func() // the other thread's loop body
		want bool
	}{
		{"spinning on another shared CPU", other, func() {}, true},
		{"sleeping between short runs on another shared CPU", other, func() {
			burn(30 * time.Microsecond)
			time.Sleep(300 * time.Microsecond)
		}, false},
		{"spinning on the waiter's shared CPU", waiter, func() {}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			type verdict struct{ team, known bool }
			look := func() [2]verdict {
				loop := exec.Command("/bin/sh", "-c", "while :; do :; done")
				if err := loop.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { loop.Process.Kill(); loop.Wait() }()
				var one unix.CPUSet
				one.Set(c.cpu)
				if err := unix.SchedSetaffinity(loop.Process.Pid, &one); err != nil {
					t.Fatal(err)
				}
				var stop atomic.Bool
				defer stop.Store(true)
				go func() {
					// Locked to the end: the thread exits with the
					// goroutine, and its life is not the next case's.
					pin(t, c.cpu)
					for !stop.Load() {
						c.step()
					}
				}()
				got := make(chan [2]verdict)
				go func() {
					pin(t, waiter)
					var sig signal.SchedSignal
					var v [2]verdict
					tid := unix.Gettid()
					time.Sleep(50 * time.Millisecond) // a life long enough to judge
					v[0].team, v[0].known = sig.Team(tid, clock.Now())
					time.Sleep(250 * time.Millisecond)
					v[1].team, v[1].known = sig.Team(tid, clock.Now())
					got <- v
				}()
				return <-got
			}
			// The first look judges the threads' lives, 50 ms here:
			// a spinner beside a busy loop has had a handful of
			// slices by then, and a fresh CI VM judged it a team in
			// some runs and not in others. It must give a verdict;
			// which one is logged, not asserted. The rule itself is
			// the window's verdict, asserted (and the library's
			// whole behaviour beside a team is TestOpenMPTeamBesideBusyLoops's).
			right := func(v [2]verdict) bool {
				return v[0].known && v[1].known && v[1].team == c.want
			}
			v := look()
			if !right(v) {
				// Other work on a loaded machine can make the threads'
				// lives look otherwise for a moment: once more, and
				// a wrong verdict again beside other processes' work
				// is a disturbed run, not a wrong rule.
				t.Logf("first look %+v, after 250 ms %+v, want team %v: looking again", v[0], v[1], c.want)
				w := disturbance.Start()
				v = look()
				if f := w.Stop(); !right(v) && f.Others > 0.10 {
					t.Skipf("verdicts %+v, want team %v, while other processes took the CPUs: %s", v, c.want, f)
				}
			}
			if !v[0].known {
				t.Errorf("the first look, from the threads' lives, gave no verdict")
			} else if v[0].team != c.want {
				t.Logf("the first look, from the threads' lives: team %v, want %v (the window's verdict decides)", v[0].team, c.want)
			}
			if !v[1].known || v[1].team != c.want {
				t.Errorf("after 250 ms, from that window: team %v (known %v), want %v", v[1].team, v[1].known, c.want)
			}
		})
	}
}
