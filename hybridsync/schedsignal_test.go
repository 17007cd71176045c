package hybridsync_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/experiments/cgroup"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// The contention signal against real contention on this machine: a
// thread alone on its CPU, two threads sharing one CPU, and a thread
// under a cgroup CPU quota with nothing else on its CPU.

// lastCPU is the CPU the tests pin to: the one least likely to carry the
// Go runtime's and the system's other work.
func lastCPU(t *testing.T) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	last := -1
	for i := range 1024 {
		if set.IsSet(i) {
			last = i
		}
	}
	return last
}

// quietCPU returns the CPU on which a spinning thread waits least for the
// CPU, and skips the test when even that one is busy with other work: a
// test of the "alone" verdicts needs a CPU that is alone.
func quietCPU(t *testing.T) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	best, bestFrac := -1, 1.0
	for cpu := range 1024 {
		if !set.IsSet(cpu) {
			continue
		}
		frac := make(chan float64)
		go func() {
			pin(t, cpu)
			defer runtime.UnlockOSThread()
			tid := unix.Gettid()
			path := fmt.Sprintf("/proc/self/task/%d/schedstat", tid)
			d0, start := readDelay(t, path), hybridsync.Now()
			burn(60 * time.Millisecond)
			frac <- float64(readDelay(t, path)-d0) / float64(hybridsync.Now()-start)
		}()
		if f := <-frac; f < bestFrac {
			best, bestFrac = cpu, f
		}
	}
	if bestFrac > 0.05 {
		t.Skipf("every CPU is busy with other work (a spinning thread waits %.0f%% of the time on the quietest): cannot test a thread alone", 100*bestFrac)
	}
	return best
}

func readDelay(t *testing.T, path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var run, delay int64
	fmt.Sscan(string(b), &run, &delay)
	return delay
}

func pin(t testing.TB, cpu int) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
}

func burn(d time.Duration) {
	end := hybridsync.Now() + d.Nanoseconds()
	for hybridsync.Now() < end {
	}
}

// verdicts runs step on the calling (pinned) thread for dur and asks sig
// about it after every step, counting the answers after a warm-up. It
// also returns the share of that time the thread waited for its CPU
// beyond what throttling explains: the background load measured at the
// same time as the verdicts, so a test of "alone" or "throttled" can tell
// a wrong verdict from a right one on a machine that got busy meanwhile.
func verdicts(sig *hybridsync.SchedSignal, dur time.Duration, step func()) (map[hybridsync.Contention]int, float64) {
	tid := unix.Gettid()
	got := map[hybridsync.Contention]int{}
	start := hybridsync.Now()
	for hybridsync.Now()-start < dur.Nanoseconds() {
		step()
		v := sig.Contention(tid, hybridsync.Now())
		if hybridsync.Now()-start > dur.Nanoseconds()/4 {
			got[v]++
		}
	}
	tot := sig.Totals()
	fmt.Printf("    signal totals: %+v\n", tot)
	if tot.Seconds <= 0 {
		return got, 0
	}
	return got, max(0, tot.RunDelaySeconds-tot.ThrottledSeconds) / tot.Seconds
}

// How much of a thread's time may go to waiting for its CPU (beyond
// throttling) before another task is taken to have competed for it. A
// thread alone on an idle CPU waits under 1%. The alone test's waiter
// sleeps and wakes ~1,000 times a second, and each wake-up that finds
// another task running is rightly judged shared: a few percent of delay
// spread over those wake-ups already makes a third of the verdicts
// shared, so its bound is tight. The spinning waiter under a quota runs
// most of each period and is hurt only by longer competition.
const (
	busyAlone     = 0.02
	busyThrottled = 0.10
)

func share(got map[hybridsync.Contention]int, c hybridsync.Contention) float64 {
	n := 0
	for _, k := range got {
		n += k
	}
	if n == 0 {
		return 0
	}
	return float64(got[c]) / float64(n)
}

func TestSchedSignalAlone(t *testing.T) {
	cpu := quietCPU(t)
	var (
		got  map[hybridsync.Contention]int
		busy float64
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pin(t, cpu)
		defer runtime.UnlockOSThread()
		// A wait loop: some host work, then a sleep as a blocked wait.
		got, busy = verdicts(&hybridsync.SchedSignal{}, 600*time.Millisecond, func() {
			burn(200 * time.Microsecond)
			time.Sleep(300 * time.Microsecond)
		})
	}()
	<-done
	t.Logf("alone on CPU %d: %v (waited for the CPU %.1f%% of the time)", cpu, got, 100*busy)
	if busy > busyAlone {
		t.Skipf("another task took CPU %d during the test (the thread waited for it %.0f%% of the time): shared is then the right verdict, and alone cannot be tested", cpu, 100*busy)
	}
	// Steal time in a VM may rightly say shared now and then.
	if s := share(got, hybridsync.ContentionShared); s > 0.3 {
		t.Errorf("alone on its CPU, %.0f%% of verdicts say shared: %v", 100*s, got)
	}
	if share(got, hybridsync.ContentionFree) < 0.5 {
		t.Errorf("alone on its CPU, too few free verdicts: %v", got)
	}
}

func TestSchedSignalSharedCPU(t *testing.T) {
	cpu := lastCPU(t)
	var stop atomic.Bool
	go func() { // the co-runner: while(1) on the same CPU
		pin(t, cpu)
		defer runtime.UnlockOSThread()
		for !stop.Load() {
		}
	}()
	defer stop.Store(true)
	for _, c := range []struct {
		name   string
		blocks bool
		step   func()
	}{
		{"spinning waiter", false, func() { burn(200 * time.Microsecond) }},
		{"blocking waiter", true, func() { burn(200 * time.Microsecond); time.Sleep(300 * time.Microsecond) }},
	} {
		done := make(chan map[hybridsync.Contention]int)
		go func() {
			pin(t, cpu)
			defer runtime.UnlockOSThread()
			got, _ := verdicts(&hybridsync.SchedSignal{}, 600*time.Millisecond, c.step)
			done <- got
		}()
		got := <-done
		t.Logf("%s sharing CPU %d with a busy loop: %v", c.name, cpu, got)
		// A waiter that blocks is owed the CPU when it wakes and, where
		// wake-up preemption works, barely waits (docs/BENCHMARKS.md,
		// "The contention signal"): it is not hurt, and the verdict may
		// rightly be free. One that spins loses whole slices, and must
		// be told.
		if c.blocks {
			continue
		}
		if share(got, hybridsync.ContentionShared) < 0.6 {
			t.Errorf("%s sharing its CPU with a busy loop: too few shared verdicts: %v", c.name, got)
		}
	}
}

// TestSchedSignalThrottled runs the waiter in a child process inside a
// cgroup with a 10 ms per 20 ms quota: throttled, not shared.
func TestSchedSignalThrottled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup with a CPU quota (CI runs as root)")
	}
	if _, err := cgroup.Detect(); err != nil {
		t.Skipf("no usable cgroup CPU controller: %v", err)
	}
	g, err := cgroup.Create(fmt.Sprintf("hybridsync-test-%d", os.Getpid()), 10*time.Millisecond, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSchedSignalChild$", "-test.v")
	// Throttled and not shared: the CPU must have no other work.
	cpu := quietCPU(t)
	cmd.Env = append(os.Environ(), "HYBRIDSYNC_SIGNAL_CHILD="+strconv.Itoa(cpu))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startAvoiding(cmd, cpu); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	stdin.Close() // the child starts once it is in the cgroup
	err = cmd.Wait()
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if i := bytes.Index(out.Bytes(), []byte(competedMark)); i >= 0 {
		line, _, _ := bytes.Cut(out.Bytes()[i+len(competedMark):], []byte("\n"))
		t.Skipf("another task competed for the CPU under the quota%s: shared is then the right verdict, and throttled-not-shared cannot be tested", line)
	}
}

// competedMark is how the child tells the parent that the verdicts it saw
// are not the test's to judge (a child's skip would not reach the parent).
const competedMark = "SCHEDSIGNAL-COMPETED:"

// startAvoiding starts cmd on every CPU but cpu. The child's own threads
// (the Go runtime's, the race detector's) would otherwise run on cpu too,
// and its spinning thread, pinned there, would rightly read them as a
// competitor: up to 45% of verdicts "shared" here, on one CPU of two. The
// child inherits the affinity of the thread that forks it.
func startAvoiding(cmd *exec.Cmd, cpu int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	others := old
	others.Clear(cpu)
	if others.Count() > 0 {
		if err := unix.SchedSetaffinity(0, &others); err != nil {
			return err
		}
		defer unix.SchedSetaffinity(0, &old)
	}
	return cmd.Start()
}

// TestSchedSignalChild is the child of TestSchedSignalThrottled.
func TestSchedSignalChild(t *testing.T) {
	cpuStr := os.Getenv("HYBRIDSYNC_SIGNAL_CHILD")
	if cpuStr == "" {
		t.Skip("runs only as the child of TestSchedSignalThrottled")
	}
	cpu, _ := strconv.Atoi(cpuStr)
	var b [1]byte
	os.Stdin.Read(b[:]) // EOF once the parent has moved us
	pin(t, cpu)
	defer runtime.UnlockOSThread()
	sig := &hybridsync.SchedSignal{}
	got, busy := verdicts(sig, 800*time.Millisecond, func() { burn(200 * time.Microsecond) })
	t.Logf("spinning under a 10/20 ms quota on CPU %d: %v (waited beyond throttling %.1f%% of the time)", cpu, got, 100*busy)
	if p := sig.QuotaPeriod(); p != 20_000_000 {
		t.Errorf("quota period %d ns, want 20 ms (the cgroup's)", p)
	}
	if busy > busyThrottled {
		fmt.Printf("%s (CPU %d: waited for it beyond throttling %.0f%% of the time)\n", competedMark, cpu, 100*busy)
		return
	}
	if share(got, hybridsync.ContentionThrottled) < 0.5 {
		t.Errorf("under a quota: too few throttled verdicts: %v", got)
	}
	if s := share(got, hybridsync.ContentionShared); s > 0.35 {
		t.Errorf("under a quota with no competitor, %.0f%% of verdicts say shared: %v", 100*s, got)
	}
}
