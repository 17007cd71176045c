// Package simdev is a simulated GPU for tests, CI and VM experiments that
// have no GPU. Like a real GPU, a kernel launched at t with duration d
// completes at t+d (later if its stream is busy) whatever the host threads
// do; Query is cheap; the blocking wait sleeps on an OS timer and pays
// whatever wake-up the OS (or the hypervisor) gives it, plus an optional
// fixed delay standing in for a device interrupt. So real scheduling and
// real vCPU discontinuity act on it as they would on a real device.
package simdev

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
)

// Device is a simulated GPU with a number of streams. It is safe for
// concurrent use.
type Device struct {
	// InterruptDelay is added to every blocking wake-up: a real GPU signals
	// completion by an interrupt that a driver thread turns into a wake-up.
	InterruptDelay time.Duration

	mu    sync.Mutex
	tails []int64 // completion time of each stream's last kernel
}

// New returns a device with the given number of streams (at least 1).
func New(streams int) *Device {
	return &Device{tails: make([]int64, max(streams, 1))}
}

// Launch starts a kernel of duration d on stream (modulo the stream count)
// and returns the event recorded right after it.
func (d *Device) Launch(stream int, dur time.Duration) *Event {
	return d.LaunchFailing(stream, dur, nil)
}

// LaunchFailing is Launch for a kernel that fails with err: its event
// reports err once complete, as a CUDA event does after a device fault.
func (d *Device) LaunchFailing(stream int, dur time.Duration, err error) *Event {
	now := clock.Now()
	d.mu.Lock()
	s := stream % len(d.tails)
	if s < 0 {
		s += len(d.tails)
	}
	done := max(now, d.tails[s]) + int64(max(dur, 0))
	d.tails[s] = done
	d.mu.Unlock()
	return &Event{launched: now, done: done, err: err, delay: int64(d.InterruptDelay)}
}

// Event is the completion of one simulated kernel.
type Event struct {
	launched, done, delay int64
	err                   error
}

var (
	_ hybridsync.Event           = (*Event)(nil)
	_ hybridsync.CompletionTimer = (*Event)(nil)
	_ hybridsync.AutoWaiter      = (*Event)(nil)
)

// Query reports whether the kernel has completed.
func (e *Event) Query() (bool, error) {
	if clock.Now() >= e.done {
		return true, e.err
	}
	return false, nil
}

// Wait sleeps on a timer until completion plus the interrupt delay.
func (e *Event) Wait() error {
	ts := unix.NsecToTimespec(e.done + e.delay)
	for clock.Now() < e.done+e.delay {
		// EINTR (a signal) just sleeps again; the loop re-checks the clock.
		unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
	}
	return e.err
}

// AutoWait spins, as CUDA's default schedule does with fewer contexts than
// CPUs.
func (e *Event) AutoWait() error {
	for clock.Now() < e.done {
	}
	return e.err
}

// LaunchedAt returns when the kernel was launched.
func (e *Event) LaunchedAt() int64 { return e.launched }

// CompletedAt returns when the kernel completed (or will).
func (e *Event) CompletedAt() (int64, bool) { return e.done, true }
