package hybridsync

import (
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// policy is one way to wait for an event that was not complete when Sync
// was called. Every implementation must return only once the event is
// complete: through a Query that said done, or through the blocking Wait.
type policy interface {
	wait(c *call) error
}

var policies = map[Mode]policy{
	ModeHybrid:   hybrid{},
	ModePaper:    paper{},
	ModeSpin:     spin{},
	ModeYield:    yield{},
	ModeBlock:    block{},
	ModeCUDAAuto: cudaAuto{},
}

type spin struct{}

func (spin) wait(c *call) error {
	c.spin(clock.Infinite)
	c.end = endSpin
	return c.err
}

type yield struct{}

// wait polls, giving the CPU to any other runnable thread between polls.
// Under a fair-share scheduler this still burns the thread's share when
// nothing else is runnable, and it loses the CPU for a whole slice when
// something is.
func (yield) wait(c *call) error {
	for {
		done, err := c.ev.Query()
		now := clock.Now()
		if done {
			c.seen, c.err, c.end = now, err, endSpin
			return err
		}
		c.notBefore = now
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

type block struct{}

func (block) wait(c *call) error { return c.block() }

type cudaAuto struct{}

// wait leaves the choice to the device. Without a device default (simdev)
// it spins, as CUDA's cudaDeviceScheduleAuto does whenever there are fewer
// contexts than CPUs.
func (cudaAuto) wait(c *call) error {
	if aw, ok := c.ev.(AutoWaiter); ok {
		start := clock.Now()
		c.err = aw.AutoWait()
		c.seen = clock.Now()
		c.blocked += c.seen - start
		c.end = endBlock
		return c.err
	}
	return spin{}.wait(c)
}

// paper is Algorithm 1 of the reference paper, exactly: T_k is the
// kernel's average time; when it exceeds max_threshold (the remaining time
// slice, capped by MaxSpin) block at once, else poll for T_k from now and
// then block. An unknown kernel has T_k = 0: no polling, block.
type paper struct{}

func (paper) wait(c *call) error {
	t, _ := c.timing()
	now := clock.Now()
	maxThreshold := c.spinCap(now)
	if t.Mean > maxThreshold {
		return c.block()
	}
	return c.spinThenBlock(now+t.Mean, endSpin)
}

// hybrid is the policy's cost model. It first asks whether the thread
// competes for its CPU (ContentionSource, from the kernel's accounting, not
// from its own spins), then:
//
//   - shared (a co-runner, another vCPU on the same CPU): block at once,
//     as CUDA's blocking-sync mode does. Every spin is taken from the
//     thread's own fair share, and a thread that sleeps is owed the CPU
//     when it wakes; a spin after a timed sleep lands when the co-runner
//     wants the CPU (docs/tried.md: "Sleep-then-spin on a shared CPU");
//   - otherwise, for a predictable kernel with time left to sleep
//     through: sleep on a timer until just before the predicted
//     completion (early by the typical timer lateness), then spin through
//     the prediction's uncertainty. Almost no CPU, and the wake-up is
//     paid while the kernel still runs;
//   - otherwise free (or no signal yet): spin, as CUDA's default does, up
//     to the remaining slice, then block; spinning costs only CPU nobody
//     wants. Throttled (a bandwidth quota, no competitor): spin only as
//     long as blocking would cost (2-competitive), since spinning spends
//     quota.
//
// Contention comes from a signal of its own, not from the policy's
// spins, which are too short to see the thread lose its CPU (docs/tried.md:
// "Contention judged from the policy's own spins"). Under LD_PRELOAD,
// waits learned to be short do not reach the policy at all (ShortWaits).
//
// The agent's mitigation (MitigationSource: a short slice, so that a
// blocked waiter's wake-up preempts the co-runner at once) makes blocking
// the better bet under contention; this policy needs no reading of it,
// since on a shared CPU it blocks at once already. The mitigation prices
// blocking where a choice is left: the armChooser's, between this policy
// and the device's own wait.
type hybrid struct{}

const (
	// warmup samples before a kernel's timing is trusted for a sleep.
	warmup = 3
	// tolFloor is the least spin window around a prediction: covers clock
	// reads and the device's completion-to-visible delay.
	tolFloor = 5_000
	// minSleep: a timed sleep shorter than this saves less CPU than the
	// sleep and wake-up themselves cost.
	minSleep = 20_000
	// defaultLate is assumed for timer and blocking wake-ups until
	// measured: Linux's default timer slack (50 µs) plus a typical wake-up.
	defaultLate = 60_000
)

func (hybrid) wait(c *call) error {
	now := clock.Now()
	state := c.contention(now)
	if state == signal.ContentionShared {
		return c.block()
	}
	if t, ok := c.timing(); ok && t.N >= warmup {
		if slept, err := c.sleepFirst(t, now, state); slept {
			return err
		}
	}
	budget := c.spinCap(now)
	if state == signal.ContentionThrottled {
		budget = min(c.s.blockLate.typical(defaultLate), budget)
	}
	if budget <= 0 {
		return c.block()
	}
	return c.spinThenBlock(now+budget, endSpin)
}

// sleepFirst sleeps until just before the predicted completion, if there
// is time enough to, then spins through the prediction's uncertainty (free:
// as long as the slice allows) and blocks if the work is still running.
// It reports whether it waited.
func (c *call) sleepFirst(t Timing, now int64, state signal.Contention) (bool, error) {
	pred := c.launch + t.Mean
	tol := 2*t.Dev + tolFloor
	wake := pred - tol - c.s.sleepLate.typical(defaultLate)
	if wake-now <= minSleep {
		return false, nil
	}
	c.sleepUntil(wake)
	now = clock.Now()
	deadline := max(pred+tol, now+tol)
	if state == signal.ContentionFree || state == signal.ContentionUnknown {
		deadline = max(deadline, now+c.spinCap(now))
	}
	if deadline-now > c.spinCap(now) {
		// Query once before blocking: work found done at the wake-up tells
		// learn the prediction was too long, which a blocking wait that
		// returns at once could not tell from a quick wake-up.
		deadline = now
	}
	return true, c.spinThenBlock(deadline, endSleepSpin)
}

// ShortWait: a kernel whose completion usually comes within this long of
// its launch (ns) is not worth a decision per wait: spinning that long
// costs less CPU than a blocking wake-up costs time on a VM, and the
// policy's own overhead per wait is a share of it (docs/tried.md: "Every
// wait through the Go policy").
const ShortWait = 150_000

// ShortWaits reports whether waits for kernel k are short enough to leave
// to the device's own wait (the default mode only): its timing is learned
// and its completion, with twice its deviation, comes within ShortWait of
// its launch. The C library then leaves its waits to CUDA until one of
// them completes later than ShortWait after its launch.
func (s *Syncer) ShortWaits(k KernelID) bool {
	if s.mode != ModeHybrid {
		return false
	}
	e := s.dict.find(k, false)
	if e == nil {
		return false
	}
	t := unpack(e.timing.Load())
	return t.N >= warmup && t.Mean+2*t.Dev < ShortWait
}
