package hints

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// TestMitigationRoundTrip: the agent's pipeline wired as `vgpu-probe
// agent --mitigate slice=100us --hints DIR` wires it (the mitigator's
// source before the publisher's, hints.Options.Mitigation from it) gives
// a real thread the kernel's 100 µs slice and publishes it in the thread's
// slot, where hybridsync.HintSource reads it; a thread of a target the
// mitigator does not see reads as not mitigated; once the mitigator has
// stopped and the slot is republished, neither does the first.
func TestMitigationRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the eBPF scheduler programs and sets another thread's slice")
	}
	const slice = 100 * time.Microsecond
	m, err := mitigate.New(mitigate.Options{Slice: slice, Log: zerolog.Nop()})
	if errors.Is(err, mitigate.ErrUnsupported) {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	probe, err := bpfload.Load(bpfload.Options{Events: true, WakeEveryEvent: true, Self: uint32(os.Getpid()), Log: zerolog.Nop()})
	if err != nil {
		t.Skipf("cannot load the eBPF programs here: %v", err)
	}
	defer probe.Close()
	pub, err := New(Options{Dir: t.TempDir(), Log: zerolog.Nop(), Mitigation: m.Slice})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pub.SetCounters(probe)

	mitigated, other := parkedThread(t), parkedThread(t)
	target := func(name string, tid int) targets.Source {
		return staticSource{targets.Target{Kind: targets.KindPID, Name: name, Threads: []targets.Thread{{TID: tid, VCPU: -1}}}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mon := monitor.New(probe, monitor.Options{Log: zerolog.Nop(), OnEvent: pub.OnEvent})
	done := make(chan struct{})
	go func() {
		defer close(done)
		mon.Run(ctx, Tee(m.Source(target("mitigated", mitigated)), pub), Tee(target("other", other), pub))
	}()
	go pub.Run(ctx)
	if err := mon.WaitTargets(ctx, 2); err != nil {
		t.Fatal(err)
	}

	if a, err := unix.SchedGetAttr(mitigated, 0); err != nil || a.Runtime != uint64(slice) {
		t.Fatalf("the thread's slice in the kernel: %+v %v, want %d ns", a, err, slice)
	}
	h := hybridsync.NewHintSource(pub.Path("mitigated"), nil, nil)
	got, ok := waitMitigation(h, mitigated, true)
	if !ok || got != slice {
		t.Fatalf("HintSource.Mitigation(%d) = %v %v, want %v", mitigated, got, ok, slice)
	}
	if got, ok := hybridsync.NewHintSource(pub.Path("other"), nil, nil).Mitigation(other); ok {
		t.Errorf("a thread the mitigator does not see reads as mitigated (%v)", got)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if got, ok := waitMitigation(h, mitigated, false); ok {
		t.Errorf("after the mitigator stopped: still %v", got)
	}
	cancel()
	<-done
}

// waitMitigation polls h for tid's mitigation until it is (or is not, as
// want says) there, for up to 2 s (the publisher refreshes every 20 ms).
func waitMitigation(h *hybridsync.HintSource, tid int, want bool) (time.Duration, bool) {
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		d, ok := h.Mitigation(tid)
		if ok == want || time.Now().After(end) {
			return d, ok
		}
	}
}

// parkedThread starts an OS thread of this process that sleeps until the
// test ends, and returns its tid.
func parkedThread(t *testing.T) int {
	tids := make(chan int)
	stop := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		tids <- unix.Gettid()
		<-stop
	}()
	t.Cleanup(func() { close(stop) })
	return <-tids
}
