//go:build linux

package bpfload

import (
	"runtime"
	"sync"
	"testing"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// pinned starts test threads on one CPU and holds them until run, so that
// a test can watch their tids before they do anything.
type pinned struct {
	t     *testing.T
	cpu   int
	wg    sync.WaitGroup
	start chan struct{}
}

func newPinned(t *testing.T, cpu int) *pinned {
	return &pinned{t: t, cpu: cpu, start: make(chan struct{})}
}

// spawn starts body on a new thread pinned to the CPU once run is called,
// and returns the thread's tid.
func (p *pinned) spawn(body func()) uint32 {
	tidc := make(chan int)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		// Never unlocked: the pinned thread ends with the goroutine,
		// so no tid is reused and no pin leaks.
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(p.cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			p.t.Error(err)
		}
		tidc <- unix.Gettid()
		<-p.start
		body()
	}()
	return uint32(<-tidc)
}

// run lets every spawned thread go and waits for them all.
func (p *pinned) run() {
	close(p.start)
	p.wg.Wait()
}

// readEvents hands each of p's records to f, on a goroutine of its own,
// until the probe is closed; the channel is closed when it has returned.
func readEvents(p *Probe, f func(ev *bpf.SchedSwitchEvent)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ev bpf.SchedSwitchEvent
		var rec ringbuf.Record
		for p.ReadEvent(&rec, &ev) == nil {
			f(&ev)
		}
	}()
	return done
}
