package hybridsync

import "golang.org/x/sys/unix"

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
	c.spin(Infinite)
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
		now := Now()
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
		start := Now()
		c.err = aw.AutoWait()
		c.seen = Now()
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
	now := Now()
	maxThreshold := c.spinCap(now)
	if t.Mean > maxThreshold {
		return c.block()
	}
	return c.spinThenBlock(now+t.Mean, endSpin)
}

// hybrid is the cost model of DESIGN.md. With a predictable kernel it
// chooses between
//
//   - sleep-then-spin: sleep on a timer until just before the predicted
//     completion (early by the typical timer lateness), then spin through
//     the prediction's uncertainty, then block. Almost no CPU, and the
//     wake-up cost is paid while the kernel still runs;
//   - spin-then-block: when the remaining wait is too short to sleep
//     through, spin for it, but only if that costs less CPU than blocking
//     costs latency (the wake-up cost B: spinning up to B and then
//     blocking is 2-competitive) and it fits in the remaining time slice.
//     Where B is large (a vCPU the hypervisor must wake) this spins long;
//     where it is small (a bare process) it almost never does;
//   - block: when neither applies, or the kernel is unknown.
type hybrid struct{}

const (
	// warmup samples before a kernel's timing is trusted. Blocking while
	// learning costs the wake-up a few times; spinning on a wrong guess
	// could cost a whole kernel of CPU.
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
	t, ok := c.timing()
	if !ok || t.N < warmup {
		return c.block()
	}
	now := Now()
	pred := c.launch + t.Mean
	tol := 2*t.Dev + tolFloor
	lead := c.s.sleepLate.typical(defaultLate)
	if wake := pred - tol - lead; wake-now > minSleep {
		c.sleepUntil(wake)
		now = Now()
		deadline := max(pred+tol, now+tol)
		if deadline-now > c.spinCap(now) {
			return c.block()
		}
		return c.spinThenBlock(deadline, endSleepSpin)
	}
	window := pred + tol - now
	if window > c.s.blockLate.typical(defaultLate)+tol || window > c.spinCap(now) {
		return c.block()
	}
	return c.spinThenBlock(now+window, endSpin)
}
