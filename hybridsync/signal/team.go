package signal

import (
	"bytes"
	"os"
	"strconv"
	"sync"
)

// teamScan tells whether other threads of the process keep other CPUs busy
// while those CPUs are contended: the workers of an OpenMP team spinning at
// a barrier for the thread that waits on the device (GNU libgomp spins
// 300,000 iterations there by default, milliseconds; LLVM's libomp 200 ms),
// each on a CPU shared with another task.
//
// Such a team runs in step only where its threads hold their CPUs at the
// same time: a spinning thread leaves its CPU only when the scheduler
// takes it, so the team keeps whatever phase it has against the
// co-runners, in step (every thread's turn on its CPU at once: a step costs
// about twice its time alone) or out of step (every hand-over between two
// threads waits for a scheduler tick). Which one a run gets is a coin flip
// that sticks until something makes a thread leave its CPU. A waiter that
// blocks gives its CPU to the co-runner and comes back out of step with the
// spinners at every wait: each step then waits for scheduler ticks, as
// libhybridsync/testdata/programs/ompsteps.c on the CUDA stand-in shows
// (docs/tried.md, "Blocking beside a spinning OpenMP team"). CUDA's blocking-sync mode leaves a plain event's waits
// spinning, so neither of CUDA's modes does that to such a program.
// armChooser cannot see it by comparing epochs either: the team's phase
// outlives the epoch that changed it, so the device arm is scored in the
// state the blocking arm left, and a single exploration can put a team
// that was in step out of step for the rest of the run.
//
// The verdict is read from the kernel's accounting of each thread of the
// process (/proc/self/task/*/schedstat and stat), over the window since the
// last scan (before the first window, over each thread's life): another
// thread that last ran on another CPU, was runnable
// (running or waiting for its CPU) teamRunnable of the window and waited
// teamWaited of it, and ran teamRun or more each time it was scheduled in:
// it never sleeps, and holds its CPU until the scheduler takes it. How much
// CPU it got does not matter: on a machine busier still, a spinning thread
// gets less and is as much in the way. A team whose threads sleep at the
// barrier (GOMP_SPINCOUNT=1000, OMP_WAIT_POLICY=PASSIVE) is runnable only
// for its work, in short runs between sleeps, and is woken on demand,
// which takes its co-runner's CPU at once: it does not count; nor does a
// thread on the waiter's own CPU, which gains from the waiter's blocks. A scan reads two files per thread:
// armChooser asks only at its reports on a contended CPU, at most a few a
// second.
//
// The zero value is ready to use.
type teamScan struct {
	mu      sync.Mutex
	at, win int64 // the last scan, and the window it closed (0: none yet)
	threads map[int]*teamThread
}

// teamThread is one thread's counters at the last scan, and what they did
// in the window it closed.
type teamThread struct {
	cpu, delay, runs    int64 // schedstat: run time, run delay (ns), times scheduled in
	dcpu, ddelay, druns int64
	proc                int   // the CPU it last ran on
	seen                int64 // the scan that read it
}

const (
	// teamRunnable, teamWaited, teamRun: another thread counts when it
	// was runnable this share of the window, waited this share of it for
	// its CPU, and ran this long (ns) per scheduling-in. Spinning beside
	// a busy loop, an OpenMP worker is runnable all the time but for the
	// program's serial parts, and runs and waits about half of it each,
	// a scheduler slice or tick at a time (ms); asleep at the barrier, it
	// is runnable for its work alone, tens of µs at a time between
	// wake-ups.
	teamRunnable = 0.4
	teamWaited   = 0.1
	teamRun      = 500_000
	// teamWindow: a scan closes a window at least this long, and a
	// verdict asked for sooner is the last window's. A shorter window
	// can fall inside a serial part of the program, in which the team's
	// threads sleep (ompsteps.c's are 20-25 ms every 100 steps), and
	// would start an exploration that puts the team out of step.
	teamWindow = 150_000_000
	// teamLifeCPU, teamLifeWaited: before the first window, a thread is
	// judged by its whole life: it ran teamRun or more per scheduling-in,
	// teamLifeCPU in all, and waited for its CPU teamLifeWaited of the
	// time it ran (beside a busy loop a spinner waits about as long as
	// it runs).
	teamLifeCPU    = 5_000_000
	teamLifeWaited = 0.25
	// TeamMaxThreads bounds a scan.
	TeamMaxThreads = 1024
)

// Team reports whether threads of the process other than tid spin on other
// contended CPUs (see teamScan), over the last window of teamWindow or more
// that ended by now, or, before the first, over the threads' lives; known
// is false where the threads cannot be read.
func (g *teamScan) Team(tid int, now int64) (team, known bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.at == 0 || now-g.at >= teamWindow {
		g.scan(now)
	}
	me := g.threads[tid]
	if me == nil || me.seen != g.at {
		return false, false
	}
	for id, x := range g.threads {
		if id != tid && x.seen == g.at && x.proc != me.proc && x.spins(g.win) {
			return true, true
		}
	}
	return false, true
}

// spins: the thread was in the way over the window win (0: over its life).
func (x *teamThread) spins(win int64) bool {
	if win == 0 {
		return x.runs > 0 && x.cpu >= teamRun*x.runs && x.cpu >= teamLifeCPU &&
			float64(x.delay) >= teamLifeWaited*float64(x.cpu)
	}
	return x.druns > 0 && x.dcpu >= teamRun*x.druns &&
		float64(x.dcpu+x.ddelay) >= teamRunnable*float64(win) && float64(x.ddelay) >= teamWaited*float64(win)
}

// scan reads every thread of the process at now.
func (g *teamScan) scan(now int64) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(TeamMaxThreads)
	d.Close()
	if g.threads == nil {
		g.threads = map[int]*teamThread{}
	}
	for _, name := range names {
		id, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		st, err1 := ReadSchedstat("/proc/self/task/" + name + "/schedstat")
		proc, ok2 := readLastCPU("/proc/self/task/" + name + "/stat")
		if err1 != nil || !ok2 {
			continue
		}
		cpu, delay, runs := st.Run, st.Delay, st.Runs
		x := g.threads[id]
		if x == nil {
			x = &teamThread{cpu: cpu, delay: delay, runs: runs}
			g.threads[id] = x
		}
		x.dcpu, x.ddelay, x.druns = cpu-x.cpu, delay-x.delay, runs-x.runs
		if x.seen != g.at || g.at == 0 {
			x.dcpu, x.ddelay, x.druns = 0, 0, 0 // new since the last scan: no window yet
		}
		x.cpu, x.delay, x.runs, x.proc, x.seen = cpu, delay, runs, proc, now
	}
	for id, x := range g.threads {
		if x.seen != now {
			delete(g.threads, id)
		}
	}
	if g.at != 0 {
		g.win = now - g.at
	}
	g.at = now
}

// readLastCPU reads the CPU a thread last ran on: field 39 of its stat,
// counted after the command name, which is in parentheses and may hold
// spaces or parentheses itself.
func readLastCPU(path string) (int, bool) {
	var buf [1024]byte
	n, err := newProcFile(path).read(buf[:])
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(buf[:n], ')')
	if i < 0 {
		return 0, false
	}
	rest := buf[i+1 : n]
	var f []byte
	for range 37 { // fields 3 (state) to 39 (processor)
		if f, rest = nextField(rest); len(f) == 0 {
			return 0, false
		}
	}
	cpu, err := strconv.Atoi(string(f))
	return cpu, err == nil && cpu >= 0
}
