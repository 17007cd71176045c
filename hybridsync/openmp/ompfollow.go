package openmp

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// GNU libgomp's spin, followed while the program runs. A thread of
// libgomp's team waiting at a barrier spins GOMP_SPINCOUNT iterations
// before it sleeps (~300,000 by default, milliseconds). On CPUs of its
// own that spin is what makes the next parallel region start at once; on
// CPUs shared with a busy neighbour it burns the slice the team's other
// threads need (launch.go). Neighbours come and go while a program runs,
// so a choice made at start is right only while they stay as they were.
//
// libgomp reads its spin count from a variable at every wait but offers
// no call to change it. hybridsync-run therefore starts the program with
// a GOMP_SPINCOUNT of its own choosing, the marker: a count next to
// libgomp's default and unlike anything else in its data. The library
// finds the one word of libgomp's data that holds that value
// (libhybridsync/lib/gompspin.c) and sets it as the CPUs' contention
// says: GompSpinBounded while a neighbour competes for them, the marker
// (the default spin) otherwise.
//
// The signal is the program's own threads' waits for their CPUs over a
// window: a thread that was runnable a good part of the window and spent
// ompWaitShare of that runnable time waiting for its CPU has a neighbour
// (alone, a thread waits a few percent at most). The share is taken of
// runnable time, not of the window, so that it holds whether the team
// spins (runnable all the window, waiting half of it beside a busy loop)
// or sleeps at its barriers (runnable only for its work, still waiting
// half of that): the verdict does not change because the spin did. A
// CPU's steal (a VM whose hypervisor reports it) and, inside a VM, the
// host agent's page (HintSource.CPUContention) count too: TCG guests and
// some clouds report no steal, and the host's neighbour shows to the guest
// only there.

// GompSpinBounded is the spin while the CPUs are contended (Bounded).
const GompSpinBounded = 1000

// Follower timing: a window is read every ompTick; ompEnterAfter
// contended windows in a row bound the spin, ompLeaveAfter free ones in a
// row give it back. One contended window alone is most often the
// program's own start (its threads and a runtime's helpers starting
// together on its CPUs), not a neighbour; a neighbour that left is gone
// for good more often than one that came is, and the default spin costs
// more beside a neighbour than the bound costs alone.
const (
	ompTick       = 100 * time.Millisecond
	ompEnterAfter = 2
	ompLeaveAfter = 5
	// ompRunnable: a thread counts in a window where it was runnable
	// (running or waiting for its CPU) this share of it or more.
	ompRunnable = 0.05
	// ompWaitShare: the share of its runnable time a counted thread
	// waited for its CPU from which the window is contended.
	ompWaitShare = 0.2
	// ompSteal: a CPU stolen this share of the last ompStealSpan is
	// contended. Steal comes in clock ticks (10 ms), a tenth of a window:
	// over one window a single tick would read as 10%.
	ompSteal     = 0.1
	ompStealSpan = 500 * time.Millisecond
	// ompLocateFor: how long after libgomp is loaded the marker is looked
	// for before the library gives up (a libgomp being loaded runs its
	// constructor after it is listed).
	ompLocateFor = 2 * time.Second
	// ompLoadWait, ompLoadPoll: a program that has not loaded libgomp
	// after ompLoadWait is looked at every ompLoadPoll rather than every
	// ompTick.
	ompLoadWait = 10 * time.Second
	ompLoadPoll = time.Second
)

// ompWindow is what the follower read over one window.
type ompWindow struct {
	span    int64       // ns
	threads []threadUse // each thread's run time and run delay in it
	steal   []float64   // each CPU's stolen share of it
	page    []signal.Contention
}

type threadUse struct{ run, delay int64 }

// ompContended is one window's verdict: whether a neighbour competes for
// the program's CPUs.
func ompContended(w ompWindow) bool {
	if w.pageContended() {
		return true
	}
	for _, s := range w.steal {
		if s >= ompSteal {
			return true
		}
	}
	if w.span <= 0 {
		return false
	}
	for _, t := range w.threads {
		r := t.run + t.delay
		if float64(r) >= ompRunnable*float64(w.span) && float64(t.delay) >= ompWaitShare*float64(r) {
			return true
		}
	}
	return false
}

// pageContended: the page says one of the program's CPUs is shared or
// throttled.
func (w ompWindow) pageContended() bool {
	for _, c := range w.page {
		if c == signal.ContentionShared || c == signal.ContentionThrottled {
			return true
		}
	}
	return false
}

// SpinWord is the waits of the program's OpenMP runtimes as the library
// reaches them: GNU libgomp's spin count (libhybridsync/lib/gompspin.c)
// and LLVM/Intel libomp's blocktime (libhybridsync/lib/ompt.c).
type SpinWord interface {
	// Loaded says whether a runtime it can reach is loaded.
	Loaded() bool
	// Locate finds the settings: how many runtime copies it now reaches
	// (0: none yet; for libgomp, the word holding marker), an error where
	// it cannot tell which word is libgomp's spin, and the first copy's
	// file or name.
	Locate(marker uint64) (n int, file string, err error)
	// Store sets the located settings to w (-1: the one the runtime
	// started with).
	Store(w Waits)
}

// OMPFollower sets libgomp's spin as its program's CPUs' contention says,
// while the program runs.
type OMPFollower struct {
	word   SpinWord
	marker uint64             // the GOMP_SPINCOUNT libgomp started with: its free spin
	hints  *signal.HintSource // nil: none
	// info gets a line at each change of the spin, warn the one line
	// that says the spin cannot be followed (either may be nil).
	info, warn func(format string, args ...any)

	mu      sync.Mutex
	prev    map[int]threadUse
	prevAt  int64
	steal0  map[int]int64 // each CPU's steal (ticks) at stealAt
	stealAt int64
	stolen  []float64 // each CPU's stolen share over the last ompStealSpan
	cpus    []int
	free    int // free windows in a row while bounded
	busy    int // contended windows in a row
	bounded bool

	active                      atomic.Bool
	why                         atomic.Pointer[string]
	file                        atomic.Pointer[string]
	windows, contended, changes atomic.Uint64
	pageWindows, pageContended  atomic.Uint64
	current                     atomic.Uint64
	blocktime                   atomic.Int64
}

// NewOMPFollower returns a follower of word, which libgomp started at
// marker (GOMP_SPINCOUNT), reading the page hints too where it is not
// nil; info gets a line at each change of the spin, warn the line that
// says why it cannot follow it.
func NewOMPFollower(word SpinWord, marker uint64, hints *signal.HintSource, info, warn func(string, ...any)) *OMPFollower {
	f := &OMPFollower{word: word, marker: marker, hints: hints, info: info, warn: warn, prev: map[int]threadUse{}}
	f.setWhy("no runtime it can follow (yet): neither a GNU libgomp nor a libomp that started the library as its OpenMP tool (OMP_TOOL=disabled keeps it from that); the waits stay as the runtime started")
	f.current.Store(marker)
	f.blocktime.Store(-1)
	return f
}

func (f *OMPFollower) setWhy(s string) { f.why.Store(&s) }

// Run follows until stop is closed, or returns once it knows it cannot
// (the reason is in Stats).
func (f *OMPFollower) Run(stop <-chan struct{}) {
	t := time.NewTicker(ompTick)
	defer t.Stop()
	start := time.Now()
	var loadedAt time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if f.active.Load() {
			f.step(clock.Now())
			continue
		}
		if !f.word.Loaded() {
			// A program that loads no libgomp for a while (a CUDA-only
			// one, a wrapper script) is looked at once a second: each
			// look wakes the library's runtime on the program's CPUs.
			if time.Since(start) > ompLoadWait {
				t.Reset(ompLoadPoll)
			}
			continue
		}
		t.Reset(ompTick)
		if loadedAt.IsZero() {
			loadedAt = time.Now()
		}
		n, file, err := f.word.Locate(f.marker)
		switch {
		case err != nil:
			f.giveUp(err.Error())
			return
		case n > 0:
			f.file.Store(&file)
			f.setWhy("")
			f.active.Store(true)
		case time.Since(loadedAt) > ompLocateFor:
			f.giveUp(fmt.Sprintf("no libgomp holds GOMP_SPINCOUNT=%d in its data", f.marker))
			return
		}
	}
}

// giveUp records and says, once, why the spin cannot be followed, and
// the static choice that stands.
func (f *OMPFollower) giveUp(why string) {
	why = fmt.Sprintf("%s: libgomp's spin stays GOMP_SPINCOUNT=%d, about its default, for the whole run", why, f.marker)
	f.setWhy(why)
	if f.warn != nil {
		f.warn("%s", why)
	}
}

// step reads one window and sets the spin from it.
func (f *OMPFollower) step(now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w, ok := f.read(now); ok {
		f.countPage(w)
		f.apply(ompContended(w))
	}
}

// countPage counts the windows in which the page answered for a CPU and
// those in which it said one was contended: what the page told the
// follower, apart from run delay and steal, which in a guest may say
// contended on their own (a guest's threads also wait for vCPUs the host
// runs slowly).
func (f *OMPFollower) countPage(w ompWindow) {
	if len(w.page) == 0 {
		return
	}
	f.pageWindows.Add(1)
	if w.pageContended() {
		f.pageContended.Add(1)
	}
}

// apply takes one window's verdict: ompEnterAfter contended windows in a
// row bound the spin, ompLeaveAfter free ones in a row give it back.
func (f *OMPFollower) apply(contended bool) {
	f.windows.Add(1)
	switch {
	case contended:
		f.contended.Add(1)
		f.free = 0
		if f.busy++; !f.bounded && f.busy >= ompEnterAfter {
			f.set(true)
		}
	case f.bounded:
		f.busy = 0
		if f.free++; f.free >= ompLeaveAfter {
			f.set(false)
		}
	default:
		f.busy = 0
	}
}

func (f *OMPFollower) set(bounded bool) {
	f.bounded = bounded
	w, why := Decide(bounded, Waits{Spin: int64(f.marker), BlocktimeMS: -1}), "free"
	if bounded {
		why = "contended"
	}
	f.word.Store(w)
	f.current.Store(uint64(w.Spin))
	f.blocktime.Store(w.BlocktimeMS)
	f.changes.Add(1)
	if f.info != nil {
		f.info("OpenMP waits: libgomp spin count %d, libomp blocktime %s (CPUs %s)", w.Spin, blocktimeWord(w.BlocktimeMS), why)
	}
}

// read closes the window that started at the last read; ok is false for
// the first read, which only starts one.
func (f *OMPFollower) read(now int64) (ompWindow, bool) {
	if f.cpus == nil {
		// Unreadable: no CPU's steal or page slot is read, the threads
		// still are.
		f.cpus, _ = affinityCPUs()
		if f.cpus == nil {
			f.cpus = []int{}
		}
	}
	cur := readThreads()
	w := ompWindow{span: now - f.prevAt}
	first := f.prevAt == 0
	for tid, u := range cur {
		if p, ok := f.prev[tid]; ok {
			w.threads = append(w.threads, threadUse{u.run - p.run, u.delay - p.delay})
		}
	}
	f.prev, f.prevAt = cur, now
	w.steal = f.readStolen(now)
	if f.hints != nil {
		for _, c := range f.cpus {
			if cc, ok := f.hints.CPUContention(c, now); ok {
				w.page = append(w.page, cc)
			}
		}
	}
	return w, !first
}

// readStolen returns each CPU's stolen share over the last ompStealSpan
// that ended by now (none before the first).
func (f *OMPFollower) readStolen(now int64) []float64 {
	if now-f.stealAt < int64(ompStealSpan) {
		return f.stolen
	}
	steal := readSteal()
	f.stolen = f.stolen[:0]
	for _, c := range f.cpus {
		a, ok1 := f.steal0[c]
		b, ok2 := steal[c]
		if ok1 && ok2 && f.stealAt > 0 {
			f.stolen = append(f.stolen, float64(b-a)*signal.TickNs/1e9/(float64(now-f.stealAt)/1e9))
		}
	}
	f.steal0, f.stealAt = steal, now
	return f.stolen
}

// readThreads reads each thread of the process's run time and run delay.
func readThreads() map[int]threadUse {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(signal.TeamMaxThreads)
	d.Close()
	out := make(map[int]threadUse, len(names))
	for _, name := range names {
		tid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, err := signal.ReadSchedstat("/proc/self/task/" + name + "/schedstat"); err == nil {
			out[tid] = threadUse{st.Run, st.Delay}
		}
	}
	return out
}

// affinityCPUs are the CPUs this process may run on.
func affinityCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading the CPUs this process may use: %w", err)
	}
	cpus := []int{}
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// OMPFollowStats is what the follower did, for the stats' openmp object.
type OMPFollowStats struct {
	// Active: the library found libgomp's spin count and sets it; Why:
	// what keeps it off.
	Active bool   `json:"active"`
	Why    string `json:"why,omitempty"`
	// Library: the libgomp whose spin count it sets.
	Library string `json:"library,omitempty"`
	// SpinCount: libgomp's spin as last set (the marker: libgomp's
	// default spin; GompSpinBounded); BlocktimeMS: libomp's blocktime as
	// last set (-1: the one it started with; 0 bounded); Changes: how
	// often they were set.
	SpinCount   uint64 `json:"spin_count"`
	BlocktimeMS int64  `json:"blocktime_ms"`
	Changes     uint64 `json:"changes"`
	// Windows: windows read; Contended: of those, contended.
	Windows   uint64 `json:"windows"`
	Contended uint64 `json:"contended"`
	// PageWindows: windows in which the hint page (HYBRIDSYNC_HINTS, a
	// guest's vCPU page) answered for one of the program's CPUs at
	// least; PageContended: of those, windows it said one was shared or
	// throttled (contended whatever the other signals said).
	PageWindows   uint64 `json:"page_windows"`
	PageContended uint64 `json:"page_contended"`
}

// Stats returns what the follower did.
func (f *OMPFollower) Stats() OMPFollowStats {
	st := OMPFollowStats{Active: f.active.Load(), SpinCount: f.current.Load(), BlocktimeMS: f.blocktime.Load(), Changes: f.changes.Load(),
		Windows: f.windows.Load(), Contended: f.contended.Load(), PageWindows: f.pageWindows.Load(), PageContended: f.pageContended.Load()}
	if w := f.why.Load(); w != nil {
		st.Why = *w
	}
	if p := f.file.Load(); p != nil {
		st.Library = *p
	}
	return st
}

// blocktimeWord is a blocktime for the log: ms, or the runtime's own.
func blocktimeWord(ms int64) string {
	if ms < 0 {
		return "as started"
	}
	return strconv.FormatInt(ms, 10) + " ms"
}
