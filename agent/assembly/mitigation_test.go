package assembly

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// TestMitigationRoundTrip: the parts as `vgpu-probe agent --mitigate
// slice=100us --hints DIR` starts them give a real thread of a followed
// target, contended by a busy loop of another process on its CPU, the
// kernel's 100 µs slice and publish it in the thread's slot, where
// signal.HintSource reads it; a thread of the process that no
// target names reads as not mitigated; once the mitigator has stopped
// and the slot is republished, neither does the first.
func TestMitigationRoundTrip(t *testing.T) {
	const slice = 100 * time.Microsecond
	a := startGated(t, slice, t.TempDir())
	cpu := schedtest.LastCPU(t)
	mitigated, other := startSpinner(t, cpu).tid, schedtest.Parked(t)
	busyLoop(t, cpu)
	a.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: "mitigated",
		Threads: []targets.Thread{{TID: mitigated, VCPU: -1}}}})
	if err := a.Monitor().WaitTargets(context.Background(), 1); err != nil {
		t.Fatal(err)
	}

	poll(t, "the short slice of a contended thread", func() bool { return schedtest.Runtime(t, mitigated) == uint64(slice) })
	if at, err := unix.SchedGetAttr(other, 0); err != nil || at.Runtime == uint64(slice) {
		t.Errorf("a thread no target names has the slice: %+v %v", at, err)
	}
	h := signal.NewHintSource(a.Publisher().Path("mitigated"), nil, nil)
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
func waitMitigation(h *signal.HintSource, tid int, want bool) (time.Duration, bool) {
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		d, ok := h.Mitigation(tid)
		if ok == want || time.Now().After(end) {
			return d, ok
		}
	}
}
