package assembly

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// startGated starts the parts as `vgpu-probe agent --mitigate
// slice=SLICE` does (the slice gated on contention; hints as asked),
// skipping where this machine cannot.
func startGated(t *testing.T, slice time.Duration, hints string) *Agent {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the eBPF scheduler programs and sets another thread's slice")
	}
	var loadErr error
	a, err := Start(context.Background(), Options{Log: zerolog.Nop(), NoState: true, GateMitigation: true,
		Mitigation: &mitigate.Config{Slice: slice}, Hints: hints,
		LoadProbe: func(o bpfload.Options) (*bpfload.Probe, error) {
			p, err := bpfload.Load(o)
			loadErr = err
			return p, err
		}})
	if errors.Is(err, mitigate.ErrUnsupported) {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	if loadErr != nil {
		t.Skipf("cannot load the eBPF programs here: %v", loadErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// spinner is an OS thread of this process on one CPU that spins, runs
// in short bursts (50 µs of work a millisecond, as a GPU waiter does:
// beside the machine's other work, it is seldom preempted) or sleeps, as
// asked.
type spinner struct {
	tid  int
	mode atomic.Int32
	wake chan struct{}
}

const (
	spinning = iota
	bursts
	resting
)

func startSpinner(t *testing.T, cpu unix.CPUSet) *spinner {
	t.Helper()
	s := &spinner{wake: make(chan struct{}, 1)}
	tids, stop := make(chan int), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.SchedSetaffinity(0, &cpu); err != nil {
			tids <- -1
			return
		}
		tids <- unix.Gettid()
		x := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			switch s.mode.Load() {
			case spinning:
				for i := range 100_000 {
					x += i
				}
				continue
			case bursts:
				for end := time.Now().Add(50 * time.Microsecond); time.Now().Before(end); {
					x++
				}
				time.Sleep(time.Millisecond)
				continue
			}
			select {
			case <-stop:
				return
			case <-s.wake:
			}
		}
	}()
	t.Cleanup(func() { close(stop) })
	if s.tid = <-tids; s.tid < 0 {
		t.Fatal("cannot pin the spinning thread")
	}
	return s
}

// set makes the thread spin, run in bursts or rest (sleep).
func (s *spinner) set(mode int32) {
	s.mode.Store(mode)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// busyLoop starts another process that spins on cpu until stop (or the
// test's end).
func busyLoop(t *testing.T, cpu unix.CPUSet) (stop func()) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	t.Cleanup(stop)
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &cpu); err != nil {
		t.Fatal(err)
	}
	return stop
}

// poll polls cond every 10 ms for up to 30 s (CI runs on a small VM
// with steal time), failing with what if it never holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestGatedOnContention: on the real kernel, a watched thread that runs
// alone (in bursts) keeps its default slice (whenever it has the short
// one, the tracker saw another process take its CPU: a loaded machine
// may do that too); spinning beside a busy loop of another process on
// its CPU it gets the short slice; once it sleeps and the loop is gone,
// its own comes back. A thread of the same target that sleeps all along
// (no other task can take a CPU it does not ask for) never has it.
func TestGatedOnContention(t *testing.T) {
	const slice = 100 * time.Microsecond
	a := startGated(t, slice, "")
	cpu := schedtest.LastCPU(t)
	s := startSpinner(t, cpu)
	s.set(bursts)
	idle := schedtest.Parked(t)
	base, idleBase := schedtest.Runtime(t, s.tid), schedtest.Runtime(t, idle)
	a.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: "spinner",
		Threads: []targets.Thread{{TID: s.tid, VCPU: -1}, {TID: idle, VCPU: -1}}}})
	idleAlone := func(when string) {
		t.Helper()
		if got := schedtest.Runtime(t, idle); got != idleBase || a.Slice(idle) != 0 {
			t.Errorf("%s: the sleeping thread's slice %d ns (reported %v), want its default %d", when, got, a.Slice(idle), idleBase)
		}
	}
	if err := a.Monitor().WaitTargets(context.Background(), 1); err != nil {
		t.Fatal(err)
	}

	// Alone: for a second, the slice only where a co-runner was seen.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		rec, _ := a.Contention().Get(s.tid)
		if a.Slice(s.tid) != 0 && rec.LastShared == 0 {
			t.Fatalf("the short slice, and no co-runner seen (record %+v)", rec)
		}
	}
	if rec, _ := a.Contention().Get(s.tid); rec.LastShared == 0 {
		if got := schedtest.Runtime(t, s.tid); got != base || a.Slice(s.tid) != 0 {
			t.Fatalf("alone: slice %d ns in the kernel (reported %v), want the default %d", got, a.Slice(s.tid), base)
		}
	} else {
		t.Logf("another process took the CPU meanwhile (record %+v): the alone check is moot", rec)
	}

	idleAlone("alone")
	s.set(spinning)
	stopLoop := busyLoop(t, cpu)
	poll(t, "the short slice beside a busy loop", func() bool {
		return schedtest.Runtime(t, s.tid) == uint64(slice) && a.Slice(s.tid) == slice
	})
	idleAlone("beside its target's contended thread")

	s.set(resting)
	stopLoop()
	poll(t, "the default slice back once free", func() bool {
		return schedtest.Runtime(t, s.tid) == base && a.Slice(s.tid) == 0
	})
}
