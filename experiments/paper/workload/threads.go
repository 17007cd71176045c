package workload

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// StreamLauncher is a Device that can launch on a given stream. RunThreads
// gives each thread its own stream when the device offers this, so that N
// threads' kernels run side by side on the GPU as NAMD's per-PE kernels do;
// otherwise they share the device's one queue.
type StreamLauncher interface {
	LaunchStream(stream int, k simdev.Kernel, d time.Duration) (hybridsync.Event, error)
}

// LaunchStream launches on the given stream.
func (s SimDevice) LaunchStream(stream int, _ simdev.Kernel, d time.Duration) (hybridsync.Event, error) {
	return s.Dev.Launch(stream, d), nil
}

// ThreadOpener opens the device and waiter of one loop thread. RunThreads
// calls it on that thread, locked to its OS thread and pinned: a CUDA
// context is current per OS thread, so the thread that launches must be
// the one that opened.
type ThreadOpener func(thread int) (Device, Waiter, func(), error)

// ThreadOpenerFor returns the ThreadOpener of the registered device name for n
// threads with mode. The simulated GPU is one device with a stream per
// thread, so the threads' kernels run side by side as on a real GPU with
// several streams, and one Syncer shared by all (safe for that; it learns
// from all). Other devices are opened once per thread: a device (e.g.
// cuda's one stream and event) is not assumed safe for concurrent use.
func ThreadOpenerFor(name string, mode hybridsync.Mode, n int) (ThreadOpener, error) {
	open, ok := devices[name]
	if !ok {
		return nil, fmt.Errorf("unknown device %q (want one of %v)", name, Devices())
	}
	if name == "sim" {
		open, _ := SimThreadOpener(hybridsync.Config{Mode: mode}, n)
		return open, nil
	}
	return func(int) (Device, Waiter, func(), error) { return open(mode) }, nil
}

// SimThreadOpener is the simulated GPU's ThreadOpener for n threads, all
// waiting with one Syncer configured by cfg, which it returns so that the
// caller can read what the waits saw (Syncer.Stats).
func SimThreadOpener(cfg hybridsync.Config, n int) (ThreadOpener, *hybridsync.Syncer) {
	s := hybridsync.New(cfg)
	d := SimDevice{Dev: simdev.New(max(n, 1))}
	return func(int) (Device, Waiter, func(), error) { return d, s.Sync, func() {}, nil }, s
}

// Wait kinds a step's Wait field takes: what the waiting thread did, as
// measured by its own CPU time over the wait (so it is the same for every
// mode and device, the built-in ones and a C library's alike).
const (
	WaitReady = "ready" // the kernel was done before the wait began
	WaitSpin  = "spin"  // on the CPU for (nearly) the whole wait
	WaitBlock = "block" // off the CPU for (nearly) the whole wait
	WaitMixed = "mixed" // some of each: spin-then-block, sleep-then-spin
)

// RunThreads runs the loop as a VM with len(cpus) vCPUs would: one thread
// per vCPU, thread i pinned to cpus[i]. A step's host work (cfg.Work) is
// split evenly across the threads; each thread then launches its own
// kernel and waits for it with wait, and all threads meet at a barrier
// before the next step, as a bulk-synchronous MD code (NAMD, GROMACS) does
// at the end of a timestep. The barrier is what makes more vCPUs more
// fragile under CPU sharing, as the paper's Fig. 4 found: a step takes as
// long as its slowest thread, so a descheduled vCPU stalls all of them.
// With one CPU it is Run's loop exactly (no barrier).
//
// Each thread opens its device with open (see ThreadOpenerFor) once pinned; when
// all have, ready (if not nil) is called once and the loop starts when it
// returns: the caller's chance to be placed (a cgroup) and told to go.
// Steps in the timeline carry the thread index and the wait kind taken.
func RunThreads(cfg Config, cpus []int, open ThreadOpener, ready func() error) (results.Result, error) {
	if cfg.Steps <= 0 || cfg.Work < 0 || len(cfg.Profile.Kernels) == 0 {
		return results.Result{}, errors.New("workload: want steps > 0, work >= 0 and at least one kernel")
	}
	n := len(cpus)
	if n == 0 || open == nil {
		return results.Result{}, errors.New("workload: want at least one cpu and a device")
	}
	// Every thread is locked to an OS thread and may spin; the runtime
	// needs a P beyond them for its own goroutines, or it would preempt a
	// worker to run them.
	if runtime.GOMAXPROCS(0) < n+1 {
		runtime.GOMAXPROCS(n + 1)
	}
	var names hybridsync.Names
	ids := make([]hybridsync.KernelID, len(cfg.Profile.Kernels))
	for i, k := range cfg.Profile.Kernels {
		ids[i] = names.ID(k.Name)
	}
	type out struct {
		tid             int
		sink            uint64
		receive, launch []int64
		tl              []results.Step
		err             error
	}
	outs := make([]out, n)
	bar := newBarrier(n)
	var failed sync.Once
	var wg sync.WaitGroup
	var start int64 // set by thread 0 before the start barrier releases all
	for t := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The thread stays locked until it exits: it is pinned, and a
			// pinned thread must not go back to the runtime's pool.
			runtime.LockOSThread()
			o := &outs[t]
			fail := func(err error) {
				o.err = err
				failed.Do(bar.abort)
			}
			if err := corunner.Pin(cpus[t]); err != nil {
				fail(err)
				return
			}
			o.tid = unix.Gettid()
			dev, wait, closeDev, err := open(t)
			if err != nil {
				fail(fmt.Errorf("thread %d: open device: %w", t, err))
				return
			}
			defer closeDev()
			// Two barriers: all devices open, then (after ready) go.
			if !bar.wait() {
				return
			}
			if t == 0 {
				if ready != nil {
					if err := ready(); err != nil {
						fail(err)
						return
					}
				}
				start = clock.Now()
			}
			if !bar.wait() {
				return
			}
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(t)))
			work := cfg.Work / int64(n)
			launcher, _ := dev.(StreamLauncher)
			for i := range cfg.Steps {
				hostStart := clock.Now()
				o.sink = spin(work, o.sink)
				hostEnd := clock.Now()
				k, d := cfg.Profile.At(i, rng)
				var ev hybridsync.Event
				var err error
				if launcher != nil {
					ev, err = launcher.LaunchStream(t, k, d)
				} else {
					ev, err = dev.Launch(k, d)
				}
				if err != nil {
					fail(fmt.Errorf("thread %d step %d: launch %s: %w", t, i, k.Name, err))
					return
				}
				launched := ev.LaunchedAt()
				var cpu0 int64
				if cfg.Timeline {
					cpu0 = threadCPU()
				}
				waitStart := clock.Now()
				if err := wait(ev, ids[i%len(ids)]); err != nil {
					fail(fmt.Errorf("thread %d step %d: wait for %s: %w", t, i, k.Name, err))
					return
				}
				noticed := clock.Now()
				o.launch = append(o.launch, launched-hostEnd)
				complete := int64(-1)
				if ct, ok := ev.(hybridsync.CompletionTimer); ok {
					if c, ok := ct.CompletedAt(); ok {
						o.receive = append(o.receive, noticed-c)
						complete = c - start
					}
				}
				if cfg.Timeline {
					o.tl = append(o.tl, results.Step{HostStart: hostStart - start, HostEnd: hostEnd - start, Launch: launched - start,
						Complete: complete, Noticed: noticed - start, Kernel: k.Name, Thread: t,
						Wait: waitKind(noticed-waitStart, threadCPU()-cpu0)})
				}
				if n > 1 && !bar.wait() {
					return // another thread failed
				}
			}
		}()
	}
	wg.Wait()
	wall := clock.Now() - start
	var receive, launch []int64
	var tl []results.Step
	var tids []int
	for _, o := range outs {
		if o.err != nil {
			return results.Result{}, o.err
		}
	}
	for _, o := range outs {
		tids = append(tids, o.tid)
		sink ^= o.sink
		receive, launch = append(receive, o.receive...), append(launch, o.launch...)
		tl = append(tl, o.tl...)
	}
	slices.SortStableFunc(tl, func(a, b results.Step) int { return cmp.Compare(a.HostStart, b.HostStart) })
	r := results.Result{WallS: float64(wall) / 1e9, Steps: cfg.Steps, Timeline: tl, StartNs: start, TIDs: tids}
	r.ReceiveP50US, r.ReceiveP99US = percentileUS(receive, 0.50), percentileUS(receive, 0.99)
	r.LaunchP50US, r.LaunchP99US = percentileUS(launch, 0.50), percentileUS(launch, 0.99)
	return r, nil
}

// spin is Spin for one of several threads: the same arithmetic, with the
// result kept per thread (Spin's shared sink would be a data race).
func spin(n int64, x uint64) uint64 {
	x |= 1
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// threadCPU returns the calling thread's CPU time in ns.
func threadCPU() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// waitKind classifies a wait of wall ns during which the thread used cpu
// ns. Under 5 µs the event was as good as complete already.
func waitKind(wall, cpu int64) string {
	switch {
	case wall < 5_000:
		return WaitReady
	case cpu >= wall*8/10:
		return WaitSpin
	case cpu <= wall*2/10:
		return WaitBlock
	}
	return WaitMixed
}

// barrier is a reusable barrier for n threads. Waiters block (the step's
// end is not what the experiment varies: every mode meets the same
// barrier, so the modes differ only in how they wait for the GPU).
type barrier struct {
	mu    sync.Mutex
	n     int
	count int
	gen   chan struct{}
	dead  bool
}

func newBarrier(n int) *barrier { return &barrier{n: n, gen: make(chan struct{})} }

// wait returns true when all n threads arrived, false if the barrier was
// aborted.
func (b *barrier) wait() bool {
	b.mu.Lock()
	if b.dead {
		b.mu.Unlock()
		return false
	}
	ch := b.gen
	b.count++
	if b.count == b.n {
		b.count = 0
		b.gen = make(chan struct{})
		b.mu.Unlock()
		close(ch)
		return true
	}
	b.mu.Unlock()
	<-ch
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.dead
}

// abort releases every waiter, now and later, with false.
func (b *barrier) abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.dead {
		b.dead = true
		close(b.gen)
	}
}
