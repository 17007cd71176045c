package signal_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
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

// quietCPU returns the CPU on which a spinning thread is disturbed least
// (waits for the CPU, or loses it to the hypervisor), and skips the test
// when even that one is busy with other work: a test of the "alone"
// verdicts needs a CPU that is alone. Steal alone does not skip: the
// tests judge the verdicts it explains after the fact.
func quietCPU(t *testing.T) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	best, bestFrac, bestFig := -1, math.Inf(1), disturbance.Figures{}
	for cpu := range 1024 {
		if !set.IsSet(cpu) {
			continue
		}
		fig := make(chan disturbance.Figures)
		go func() {
			pin(t, cpu)
			defer runtime.UnlockOSThread()
			w := disturbance.Start(unix.Gettid())
			burn(60 * time.Millisecond)
			fig <- w.Stop()
		}()
		f := <-fig
		if frac := f.RunDelay + f.StealOn(cpu); frac < bestFrac {
			best, bestFrac, bestFig = cpu, frac, f
		}
	}
	if bestFig.RunDelay > 0.05 {
		t.Skipf("every CPU is busy with other work (a spinning thread on the quietest, CPU %d, waited for it %.0f%% of the time: %v): cannot test a thread alone", best, 100*bestFig.RunDelay, bestFig)
	}
	return best
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
	end := clock.Now() + d.Nanoseconds()
	for clock.Now() < end {
	}
}

// verdicts runs step on the calling (pinned) thread for dur and asks sig
// about it after every step, counting the answers after a warm-up. It
// also returns what disturbed the thread meanwhile (its run delay, the
// throttling of its cgroup, the steal time of its CPU): measured at the
// same time as the verdicts, so that a test of "alone" or "throttled" can
// tell a wrong verdict from a right one on a machine that got busy.
func verdicts(sig *signal.SchedSignal, dur time.Duration, step func()) (map[signal.Contention]int, disturbance.Figures) {
	tid := unix.Gettid()
	got := map[signal.Contention]int{}
	w := disturbance.Start(tid)
	start := clock.Now()
	for clock.Now()-start < dur.Nanoseconds() {
		step()
		v := sig.Contention(tid, clock.Now())
		if clock.Now()-start > dur.Nanoseconds()/4 {
			got[v]++
		}
	}
	f := w.Stop()
	fmt.Printf("    signal totals: %+v\n", sig.Totals())
	return got, f
}

// competed is the share of a thread's time it waited for its CPU beyond
// what throttling explains: another task took the CPU.
func competed(f disturbance.Figures) float64 { return max(0, f.RunDelay-f.Throttled) }

// How much of a thread's time may go to waiting for its CPU (beyond
// throttling) before another task is taken to have competed for it, for
// a test whose verdicts came out wrong. A thread alone on an idle CPU
// waits under 1%; the signal itself calls 2% shared. The alone test's
// waiter sleeps and wakes ~1,000 times a second, and each wake-up that
// finds another task running is rightly judged shared. Under the quota
// a throttle's time is counted when it ends, so one under way when the
// child stops (at most 10 ms) reads as competition: about 1.3% of its
// 0.8 s. Other processes' 8% beyond throttling made 81% of its verdicts
// rightly shared.
const (
	busyAlone     = 0.02
	busyThrottled = 0.03
	// othersAlone: the share of the machine's CPU time other processes
	// may use before the alone test's CPU is not the thread's alone (a
	// quiet machine's daemons use a few percent).
	othersAlone = 0.25
)

func share(got map[signal.Contention]int, c signal.Contention) float64 {
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
		got map[signal.Contention]int
		fig disturbance.Figures
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pin(t, cpu)
		defer runtime.UnlockOSThread()
		// A wait loop: some host work, then a sleep as a blocked wait.
		got, fig = verdicts(&signal.SchedSignal{}, 600*time.Millisecond, func() {
			burn(200 * time.Microsecond)
			time.Sleep(300 * time.Microsecond)
		})
	}()
	<-done
	t.Logf("alone on CPU %d: %v (%v)", cpu, got, fig)
	shared, free := share(got, signal.ContentionShared), share(got, signal.ContentionFree)
	if shared <= 0.3 && free >= 0.5 {
		return
	}
	if busy := competed(fig); busy > busyAlone {
		t.Skipf("another task took CPU %d during the test (the thread waited for it %.0f%% of the time; %v): shared is then the right verdict (%.0f%% of verdicts), and alone cannot be tested", cpu, 100*busy, fig, 100*shared)
	}
	// A task of lower priority (a nice 19 loop) hardly delays the thread
	// but takes its CPU whenever it sleeps: the signal counts a CPU that
	// never idles while the thread sleeps as shared, rightly.
	if fig.Others > othersAlone {
		t.Skipf("other processes used %.0f%% of the machine's CPU time during the test (%v): its CPU was not the thread's alone, so shared is the right verdict (%.0f%% of verdicts), and alone cannot be tested", 100*fig.Others, fig, 100*shared)
	}
	// The signal reads steal time as another VM competing for the
	// physical CPU, and a 10 ms tick of it keeps the verdict shared for
	// about 100 ms: in a VM, a thread alone on its vCPU is rightly told
	// shared then.
	if st := fig.StealOn(cpu); st > 0 {
		t.Skipf("the hypervisor took CPU %d for %.1f%% of the test (steal time), which the signal rightly reads as contention: %.0f%% of verdicts say shared (%v)", cpu, 100*st, 100*shared, fig)
	}
	if shared > 0.3 {
		t.Errorf("alone on its CPU, %.0f%% of verdicts say shared: %v", 100*shared, got)
	}
	if free < 0.5 {
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
		name string
		min  float64 // the least share of shared verdicts
		step func(sig *signal.SchedSignal)
	}{
		{"spinning waiter", 0.6, func(*signal.SchedSignal) { burn(200 * time.Microsecond) }},
		// As hybrid waits: blocks while the verdict is shared, else
		// spins. A blocked waiter is owed the CPU when it wakes and
		// barely waits for it (docs/BENCHMARKS.md, "The contention
		// signal"), but its CPU never idles: the verdict must stay
		// shared, or its next waits spin and lose whole slices.
		{"blocking waiter", 0.9, func(sig *signal.SchedSignal) {
			burn(200 * time.Microsecond)
			if sig.Contention(unix.Gettid(), clock.Now()) == signal.ContentionShared {
				time.Sleep(300 * time.Microsecond)
			} else {
				burn(300 * time.Microsecond)
			}
		}},
	} {
		done := make(chan map[signal.Contention]int)
		go func() {
			pin(t, cpu)
			defer runtime.UnlockOSThread()
			sig := &signal.SchedSignal{}
			got, _ := verdicts(sig, 600*time.Millisecond, func() { c.step(sig) })
			done <- got
		}()
		got := <-done
		t.Logf("%s sharing CPU %d with a busy loop: %v", c.name, cpu, got)
		if share(got, signal.ContentionShared) < c.min {
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
	if _, err := cpucap.Detect(); err != nil {
		t.Skipf("no usable cgroup CPU controller: %v", err)
	}
	g, err := cpucap.Create(fmt.Sprintf("hybridsync-test-%d", os.Getpid()), 10*time.Millisecond, 20*time.Millisecond)
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
		t.Skipf("another task or VM competed for the CPU under the quota%s: shared is then the right verdict, and throttled-not-shared cannot be tested", line)
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
	// Under the quota a competitor's time mostly turns into less
	// throttling, not more waiting, so other work shows little beyond
	// throttling; yet each 2 ms it takes from the thread is rightly
	// judged shared and held 50 ms. Other tasks running 10% of the CPU
	// in 2 ms bursts left 0.3-1.5% beyond throttling and made 40-70% of
	// the verdicts shared in 3 runs of 25 (a clean CI run once: 39%,
	// "other processes 11% of the CPUs"). Such bursts seldom hit twice in
	// a row (2 first measurements of 40 wrong, no second), so a wrong
	// first measurement is taken again and the second judged; a signal
	// that misjudges throttling fails both (one that ignores the
	// throttled time: 100% shared, twice).
	for attempt := 1; ; attempt++ {
		sig := &signal.SchedSignal{}
		got, fig := verdicts(sig, 800*time.Millisecond, func() { burn(200 * time.Microsecond) })
		busy := competed(fig)
		t.Logf("spinning under a 10/20 ms quota on CPU %d: %v (waited beyond throttling %.1f%% of the time; %v)", cpu, got, 100*busy, fig)
		if p := sig.QuotaPeriod(); p != 20_000_000 {
			t.Errorf("quota period %d ns, want 20 ms (the cgroup's)", p)
		}
		throttled, shared := share(got, signal.ContentionThrottled), share(got, signal.ContentionShared)
		if throttled >= 0.5 && shared <= 0.35 {
			return
		}
		if busy > busyThrottled {
			fmt.Printf("%s (CPU %d: waited for it beyond throttling %.0f%% of the time, %.0f%% of verdicts say shared; %v)\n", competedMark, cpu, 100*busy, 100*shared, fig)
			return
		}
		// Steal is another VM competing for the physical CPU (see
		// TestSchedSignalAlone).
		if st := fig.StealOn(cpu); st > 0 {
			fmt.Printf("%s (the hypervisor took CPU %d for %.1f%% of the test, steal time: %.0f%% of verdicts say shared; %v)\n", competedMark, cpu, 100*st, 100*shared, fig)
			return
		}
		if attempt == 1 {
			t.Logf("%.0f%% throttled, %.0f%% shared: measuring again", 100*throttled, 100*shared)
			continue
		}
		if throttled < 0.5 {
			t.Errorf("under a quota: too few throttled verdicts: %v", got)
		}
		if shared > 0.35 {
			t.Errorf("under a quota with no competitor, %.0f%% of verdicts say shared: %v", 100*shared, got)
		}
		return
	}
}
