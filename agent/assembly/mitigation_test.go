package assembly

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
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// TestMitigationRoundTrip: the parts as `vgpu-probe agent --mitigate
// slice=100us --hints DIR` starts them give a real thread of a followed
// target the kernel's 100 µs slice and publish it in the thread's slot,
// where hybridsync.HintSource reads it; a thread of the process that no
// target names reads as not mitigated; once the mitigator has stopped
// and the slot is republished, neither does the first.
func TestMitigationRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the eBPF scheduler programs and sets another thread's slice")
	}
	const slice = 100 * time.Microsecond
	var loadErr error
	a, err := Start(context.Background(), Options{Log: zerolog.Nop(), NoState: true,
		Mitigation: &mitigate.Config{Slice: slice}, Hints: t.TempDir(),
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
	defer a.Close()

	mitigated, other := parkedThread(t), parkedThread(t)
	a.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: "mitigated",
		Threads: []targets.Thread{{TID: mitigated, VCPU: -1}}}})
	if err := a.Monitor().WaitTargets(context.Background(), 1); err != nil {
		t.Fatal(err)
	}

	if at, err := unix.SchedGetAttr(mitigated, 0); err != nil || at.Runtime != uint64(slice) {
		t.Fatalf("the thread's slice in the kernel: %+v %v, want %d ns", at, err, slice)
	}
	if at, err := unix.SchedGetAttr(other, 0); err != nil || at.Runtime == uint64(slice) {
		t.Errorf("a thread no target names has the slice: %+v %v", at, err)
	}
	h := hybridsync.NewHintSource(a.Publisher().Path("mitigated"), nil, nil)
	got, ok := waitMitigation(h, mitigated, true)
	if !ok || got != slice {
		t.Fatalf("HintSource.Mitigation(%d) = %v %v, want %v", mitigated, got, ok, slice)
	}
	if got, ok := h.Mitigation(other); ok {
		t.Errorf("a thread no target names reads as mitigated (%v)", got)
	}
	if err := a.Mitigator().Stop(); err != nil {
		t.Fatal(err)
	}
	if got, ok := waitMitigation(h, mitigated, false); ok {
		t.Errorf("after the mitigator stopped: still %v", got)
	}
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
