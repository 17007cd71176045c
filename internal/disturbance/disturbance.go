// Package disturbance measures what could have disturbed a timing test
// during its own run: how long its threads waited for a CPU (run delay,
// /proc/self/task/<tid>/schedstat), how long its cgroups were throttled by a
// CPU quota (cpu.stat), how much of each CPU the hypervisor gave to
// something else (steal time, /proc/stat), and how often some task on the
// machine waited for a CPU (/proc/pressure/cpu).
//
// A test that judges timing starts a Window before what it judges and
// stops it after, and either passes or skips naming the figures: a shared
// CI machine (a 2-vCPU VM with steal time, tests of other packages, a
// compiler) makes any timing wrong now and then, and only the figures of
// that very run tell a wrong result from a disturbed one.
package disturbance

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/cgroups"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// Window is a span of a test whose disturbances are being counted.
type Window struct {
	start     time.Time
	tids      []int // nil: every thread of the process
	delay     map[int]int64
	cpus      []signal.CPUTicks
	ours      int64 // CPU ticks of this process and its descendants
	throttled int64
	waiting   int64 // PSI cpu "some" total, µs; -1: no PSI
}

// Start begins a window over threads tids of this process, or over all
// of its threads if none are given.
func Start(tids ...int) *Window {
	// The run delay is read next to the clock: the other readings (a walk
	// of /proc among them) take long enough on a busy machine for the
	// thread to wait meanwhile, which would count outside the window.
	w := &Window{tids: tids, start: time.Now()}
	w.delay = runDelays(tids)
	w.cpus, _ = signal.ReadCPUTicks()
	w.ours = treeTicks()
	w.throttled = throttledNs()
	w.waiting = waitingUs()
	return w
}

// Figures is what disturbed a window.
type Figures struct {
	Seconds float64 // the window's length
	// RunDelay is the time the watched threads were runnable but not
	// running, per second of the window: for one thread, the fraction
	// of its time it waited for a CPU; for several, the mean number
	// waiting. Threads that exited during the window are not counted,
	// and a wait is counted when it ends: one begun before the window
	// counts whole.
	RunDelay float64
	// Throttled is the fraction of the window the most throttled of the
	// process's cgroups was held back by its CPU quota.
	Throttled float64
	// Steal is each CPU's share of its time the hypervisor ran something
	// else on it (0 on bare metal), indexed by CPU number. /proc/stat
	// counts it in 10 ms ticks: one tick in a 100 ms window reads 10%.
	Steal []float64
	// Others is the share of the machine's CPU time (all CPUs, less
	// steal) that tasks outside this process and its descendants used:
	// a test's children are its own, anything else competes with it.
	// -1 where unknown.
	Others float64
	// Waiting is the fraction of the window in which some task on the
	// machine (the test's own included) waited for a CPU; -1 where the
	// kernel has no pressure stall information.
	Waiting float64
}

// Stop ends the window and returns its figures.
func (w *Window) Stop() Figures {
	delays := runDelays(w.tids)
	dt := time.Since(w.start)
	f := Figures{Seconds: dt.Seconds(), Waiting: -1, Others: -1}
	for tid, d := range delays {
		d0, ok := w.delay[tid]
		if !ok && w.tids != nil {
			continue // a thread named but not read at the start
		}
		f.RunDelay += float64(d - d0) // new threads: their whole life
	}
	f.RunDelay /= float64(dt.Nanoseconds())
	f.Throttled = float64(throttledNs()-w.throttled) / float64(dt.Nanoseconds())
	cpus, _ := signal.ReadCPUTicks()
	f.Steal = stealFractions(w.cpus, cpus)
	f.Others = othersShare(w.cpus, cpus, treeTicks()-w.ours)
	if w.waiting >= 0 {
		if now := waitingUs(); now >= 0 {
			// The kernel adds a stall to the total when it ends or
			// when it is next read, so a short window may be given more
			// than its length.
			f.Waiting = min(1, float64(now-w.waiting)*1e3/float64(dt.Nanoseconds()))
		}
	}
	return f
}

// StealOn returns the steal fraction of cpu (0 where unknown).
func (f Figures) StealOn(cpu int) float64 {
	if cpu < 0 || cpu >= len(f.Steal) {
		return 0
	}
	return f.Steal[cpu]
}

// MaxSteal returns the steal fraction of the most stolen-from CPU.
func (f Figures) MaxSteal() float64 {
	m := 0.0
	for _, s := range f.Steal {
		m = max(m, s)
	}
	return m
}

// Over reports whether the watched threads waited for a CPU, or their
// cgroups were throttled, or some CPU lost to the hypervisor, or other
// processes used the CPUs, for more than frac of the window: enough to
// make a timing test's result the machine's rather than the code's.
func (f Figures) Over(frac float64) bool {
	return f.RunDelay > frac || f.Throttled > frac || f.MaxSteal() > frac || f.Others > frac
}

// Check ends a timing test whose run f measured, given what it found
// wrong: nothing wrong passes whatever the machine did; something wrong
// skips, naming it and the figures, when the run was disturbed by more
// than frac (Over), and fails the test otherwise.
func (f Figures) Check(t testing.TB, frac float64, failures ...string) {
	t.Helper()
	if len(failures) == 0 {
		return
	}
	if f.Over(frac) {
		t.Skipf("%s; but the machine was busy (%v; over %.0f%%, timing is the machine's, not the code's)", strings.Join(failures, "; "), f, 100*frac)
		return
	}
	for _, msg := range failures {
		t.Error(msg)
	}
	t.Logf("nothing measured explains it: %v", f)
}

// String names every figure, for a test's log and skip messages.
func (f Figures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "over %.2fs: run delay %.1f%%, throttled %.1f%%, steal", f.Seconds, 100*f.RunDelay, 100*f.Throttled)
	if len(f.Steal) == 0 {
		b.WriteString(" unknown")
	}
	for cpu, s := range f.Steal {
		fmt.Fprintf(&b, " %.1f%% (CPU %d)", 100*s, cpu)
	}
	if f.Others >= 0 {
		fmt.Fprintf(&b, ", other processes %.0f%% of the CPUs", 100*f.Others)
	}
	if f.Waiting >= 0 {
		fmt.Fprintf(&b, ", some task waiting for a CPU %.0f%% of the time", 100*f.Waiting)
	}
	return b.String()
}

// runDelays returns the run delay (ns) of threads tids, or of every
// thread of the process; a thread that has exited is left out.
func runDelays(tids []int) map[int]int64 {
	if tids == nil {
		ents, _ := os.ReadDir("/proc/self/task")
		for _, e := range ents {
			if tid, err := strconv.Atoi(e.Name()); err == nil {
				tids = append(tids, tid)
			}
		}
	}
	out := make(map[int]int64, len(tids))
	for _, tid := range tids {
		if d, ok := runDelay(tid); ok {
			out[tid] = d
		}
	}
	return out
}

func runDelay(tid int) (int64, bool) {
	st, err := signal.ReadSchedstat("/proc/self/task/" + strconv.Itoa(tid) + "/schedstat")
	return st.Delay, err == nil
}

// stealFractions returns, per CPU number, the share of the ticks between
// two readings that were steal.
func stealFractions(before, after []signal.CPUTicks) []float64 {
	var out []float64
	for _, a := range after {
		for _, b := range before {
			if b.CPU != a.CPU || a.Total <= b.Total {
				continue
			}
			for len(out) <= a.CPU {
				out = append(out, 0)
			}
			out[a.CPU] = float64(a.Steal-b.Steal) / float64(a.Total-b.Total)
		}
	}
	return out
}

// othersShare returns the share of the CPU time between two readings,
// less steal, that was busy but not with ours (ticks); -1 without
// readings.
func othersShare(before, after []signal.CPUTicks, ours int64) float64 {
	var busy, avail int64
	for _, a := range after {
		for _, b := range before {
			if b.CPU == a.CPU {
				steal := a.Steal - b.Steal
				avail += a.Total - b.Total - steal
				busy += a.Total - b.Total - steal - (a.Idle - b.Idle)
			}
		}
	}
	if avail <= 0 {
		return -1
	}
	return min(1, max(0, float64(busy-ours)/float64(avail)))
}

// treeTicks returns the CPU time (user and system, in /proc's ticks) of
// this process and of every live descendant, each with the children it
// has reaped: a descendant that exits moves its time into its parent's.
func treeTicks() int64 {
	me := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	ticks := map[int]int64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if pp, t, ok := parseStat(string(b)); ok {
			parent[pid], ticks[pid] = pp, t
		}
	}
	var sum int64
	for pid, t := range ticks {
		for p := pid; p > 1; p = parent[p] {
			if p == me {
				sum += t
				break
			}
		}
	}
	return sum
}

// parseStat reads the parent pid and utime+stime+cutime+cstime (fields
// 4 and 14-17) of a /proc/PID/stat line; the command name may hold spaces
// and parentheses, so fields count from its last ')'.
func parseStat(s string) (ppid int, ticks int64, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 15 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks += n
	}
	return ppid, ticks, true
}

// throttledNs returns the throttled time of the most throttled cgroup of
// the process, its own or an ancestor (v2: throttled_usec; v1:
// throttled_time, ns); 0 where none has a quota.
func throttledNs() int64 {
	ms, err := cgroups.Of("", 0)
	if err != nil {
		return 0
	}
	var most int64
	for _, m := range ms {
		var base string
		switch {
		case m.Unified():
			base = "/sys/fs/cgroup"
		case m.Has("cpu"):
			base = "/sys/fs/cgroup/" + strings.Join(m.Controllers, ",")
			if _, err := os.Stat(base); err != nil {
				base = "/sys/fs/cgroup/cpu"
			}
		default:
			continue
		}
		for dir := m.Path; ; {
			most = max(most, cpuStatThrottled(base+dir+"/cpu.stat"))
			i := strings.LastIndexByte(dir, '/')
			if i <= 0 {
				break
			}
			dir = dir[:i]
		}
	}
	return most
}

func cpuStatThrottled(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch {
		case err != nil:
		case k == "throttled_usec":
			return n * 1000
		case k == "throttled_time":
			return n
		}
	}
	return 0
}

// waitingUs returns the machine's CPU pressure "some" total: µs in which
// at least one runnable task waited for a CPU; -1 without PSI.
func waitingUs() int64 {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return -1
	}
	return parseWaiting(string(b))
}

func parseWaiting(s string) int64 {
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return -1
}
