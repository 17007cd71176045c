package mitigate

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/agent/runstate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// reuseTID makes the child start a thread whose tid is tid (free now),
// through /proc/sys/kernel/ns_last_pid, with another start time than
// start; other processes forking meanwhile, or the child's runtime
// running the thread on a thread it had, cost a try.
func reuseTID(t *testing.T, c *child, tid int, start uint64) {
	t.Helper()
	for range 200 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(tid-1)), 0); err != nil {
			t.Skipf("cannot choose the next thread id (/proc/sys/kernel/ns_last_pid): %v", err)
		}
		got := c.newThread(t)
		if got == tid {
			if st, err := runstate.StartTime(tid); err == nil && st != start {
				return
			}
		}
		c.do(t, "end")
		// Start times count clock ticks: a thread made within the same
		// tick as the old one cannot be told from it.
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("thread id %d never reused in 200 tries", tid)
}

// A watched thread exits and another thread takes its tid before its
// contention calls for the slice: the new thread does not get it, the
// one still watched does.
func TestReusedTIDGetsNoSlice(t *testing.T) {
	newMitigator(t) // skips where custom slices are unavailable
	if os.Geteuid() != 0 {
		t.Skip("reuses a thread id through /proc/sys/kernel/ns_last_pid: needs root")
	}
	cont := contention.NewTracker(42)
	m, err := New(Options{Slice: slice, Log: zerolog.Nop(), Contention: cont})
	if err != nil {
		t.Fatal(err)
	}
	now := uint64(10 * contention.For)
	m.now = func() uint64 { return now }
	c := startChild(t)
	kept, gone := c.newThread(t), c.newThread(t)
	start, err := runstate.StartTime(gone)
	if err != nil {
		t.Fatal(err)
	}
	m.Apply(targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: "p",
		Threads: []targets.Thread{{TID: kept, VCPU: -1}, {TID: gone, VCPU: -1}}}})
	c.do(t, "end") // the newest: gone
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(gone)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not exit", gone)
		}
	}
	reuseTID(t, c, gone, start)

	// Both preempted by another process: contended.
	for _, tid := range []int{kept, gone} {
		cont.Learn(&bpf.SchedSwitchEvent{InNs: now, OffNs: 4_000_000, RunNs: 3_000_000, Tid: uint32(tid),
			Tgid: uint32(c.cmd.Process.Pid), Preempted: 1, OtherTgid: 77})
	}
	m.gate(now)
	if got := schedtest.Runtime(t, kept); got != uint64(slice) || !m.Mitigated(kept) {
		t.Errorf("the watched thread %d: runtime %d (mitigated %v), want %d", kept, got, m.Mitigated(kept), slice)
	}
	if got := schedtest.Runtime(t, gone); got == uint64(slice) || m.Mitigated(gone) {
		t.Errorf("the thread that took tid %d got the slice (runtime %d, mitigated %v)", gone, got, m.Mitigated(gone))
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := schedtest.Runtime(t, kept); got == uint64(slice) {
		t.Errorf("Stop left the slice on thread %d", kept)
	}
}
