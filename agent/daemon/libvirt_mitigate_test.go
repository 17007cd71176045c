package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/assembly"
	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// With the real libvirtd and QEMU, --mitigate gives a domain's vCPU threads
// and its QEMU main thread (the emulator's main loop, which under TCG
// injects the interrupt that wakes a halted vCPU) the slice, and gives it
// back at stop.
func TestLibvirtMitigateEmulatorThread(t *testing.T) {
	l := libvirttest.Connect(t) // skips, saying why, without root or libvirtd
	src, err := newLibvirtSource(libvirttest.Socket(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ag, err := assembly.Start(context.Background(), assembly.Options{Mitigation: &mitigate.Config{Slice: 100 * time.Microsecond}, Log: zerolog.Nop()})
	if errors.Is(err, mitigate.ErrUnsupported) {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	events := make(chan targets.Event, 16)
	ag.Follow(seen{src, events})

	d := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 1})
	var tg targets.Target
	for timeout := time.After(30 * time.Second); len(tg.Threads) == 0; {
		select {
		case ev := <-events:
			if ev.Kind == targets.Added && ev.Target.Name == d.Name {
				tg = ev.Target
			}
		case <-timeout:
			t.Fatalf("domain %s not seen after 30s", d.Name)
		}
	}
	st, err := procstat.Status(tg.Threads[0].TID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tg.Helpers) != 1 || tg.Helpers[0] != st.TGID {
		t.Fatalf("helpers %v, want the QEMU process's main thread %d", tg.Helpers, st.TGID)
	}
	// The event is seen as it is passed on, just before the agent
	// applies it.
	for _, tid := range []int{tg.Threads[0].TID, st.TGID} {
		var got uint64
		for deadline := time.Now().Add(10 * time.Second); got != 100_000 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			a, err := unix.SchedGetAttr(tid, 0)
			if err != nil {
				t.Fatal(err)
			}
			got = a.Runtime
		}
		if got != 100_000 {
			t.Errorf("thread %d: slice %d ns, want 100000", tid, got)
		}
	}
	ag.Close()
	a, err := unix.SchedGetAttr(st.TGID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Runtime == 100_000 || a.Runtime == 0 {
		t.Errorf("QEMU main thread: slice %d ns after stop, want the default back", a.Runtime)
	}
}

// seen passes a source's events on and copies them to a channel the test
// reads (never blocking the source: the test reads only what it needs).
type seen struct {
	src targets.Source
	out chan<- targets.Event
}

func (s seen) Run(ctx context.Context) <-chan targets.Event {
	in := s.src.Run(ctx)
	out := make(chan targets.Event)
	go func() {
		defer close(out)
		for ev := range in {
			select {
			case s.out <- ev:
			default:
			}
			out <- ev
		}
	}()
	return out
}
