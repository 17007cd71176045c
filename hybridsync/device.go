package hybridsync

// Event is one point in a device stream that a host thread waits for, such as
// a CUDA event recorded right after a kernel launch.
type Event interface {
	// Query reports, without blocking, whether the work is complete. When it
	// is complete, err is what the device's blocking wait would return.
	Query() (done bool, err error)
	// Wait blocks the calling thread (sleeps, does not spin) until the work is
	// complete and returns the device's error for it.
	Wait() error
	// LaunchedAt is when the awaited kernel was launched, in Now's clock, or
	// 0 when unknown. Kernel timing is learned from launch to completion.
	LaunchedAt() int64
}

// CompletionTimer is implemented by events that know when they completed (a
// simulated device does exactly). Sync then learns kernel durations and the
// wake-up cost exactly instead of bounding them.
type CompletionTimer interface {
	// CompletedAt returns the completion time in Now's clock, if known.
	CompletedAt() (t int64, ok bool)
}

// AutoWaiter is implemented by events whose device has a default wait of its
// own (CUDA's cudaDeviceScheduleAuto); ModeCUDAAuto uses it.
type AutoWaiter interface {
	AutoWait() error
}
