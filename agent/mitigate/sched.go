package mitigate

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is wrapped by Check's error on a kernel without custom
// EEVDF slices.
var ErrUnsupported = errors.New("kernel without EEVDF custom slices")

// Sched reads and writes a thread's scheduling attributes; tests replace
// it to play kernels that lack custom slices.
type Sched interface {
	Get(tid int) (*unix.SchedAttr, error)
	Set(tid int, a *unix.SchedAttr) error
}

// System is the running kernel's sched_getattr and sched_setattr.
var System Sched = sysSched{}

type sysSched struct{}

func (sysSched) Get(tid int) (*unix.SchedAttr, error) { return unix.SchedGetAttr(tid, 0) }
func (sysSched) Set(tid int, a *unix.SchedAttr) error { return unix.SchedSetAttr(tid, a, 0) }

// withRuntime returns a copy of a that sets sched_runtime to runtime and
// keeps the policy, nice value and reset-on-fork flag. Other flags are
// dropped: SCHED_FLAG_KEEP_PARAMS would make the kernel skip the slice
// too, and the utilisation clamps stay as they are without their flag.
func withRuntime(a *unix.SchedAttr, runtime uint64) *unix.SchedAttr {
	b := *a
	b.Flags &= unix.SCHED_FLAG_RESET_ON_FORK
	b.Runtime = runtime
	b.Deadline, b.Period = 0, 0
	return &b
}

// fair reports whether the policy is one whose slice sched_runtime sets.
// SCHED_IDLE threads are fair-class too, but are meant to yield to
// everything: they are left alone.
func fair(policy uint32) bool {
	return policy == unix.SCHED_NORMAL || policy == unix.SCHED_BATCH
}

// Check tries slice on a thread of this process, reads it back and puts
// the thread's attributes back. It returns the thread's slice before, the
// kernel's default slice (which getattr reports for a thread without a
// custom one), or an error wrapping ErrUnsupported where the kernel
// refuses sched_runtime for SCHED_OTHER (EINVAL) or ignores it (before
// Linux 6.12 getattr reads back 0).
func Check(s Sched, slice uint64) (base uint64, err error) {
	type result struct {
		base uint64
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// Given back only once its attributes are back as they were (so
		// no other goroutine runs with a changed slice); ending it instead
		// would kill children started from it with Pdeathsig (Inherit).
		runtime.LockOSThread()
		tid := unix.Gettid()
		before, _ := s.Get(tid)
		b, err := probe(s, tid, slice)
		if after, gerr := s.Get(tid); before != nil && gerr == nil && after.Runtime == before.Runtime {
			runtime.UnlockOSThread()
		}
		ch <- result{b, err}
	}()
	r := <-ch
	return r.base, r.err
}

func probe(s Sched, tid int, slice uint64) (uint64, error) {
	a, err := s.Get(tid)
	if err != nil {
		return 0, fmt.Errorf("sched_getattr: %w", err)
	}
	err = s.Set(tid, withRuntime(a, slice))
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.E2BIG) {
		return 0, unsupported(err)
	}
	if err != nil {
		return 0, fmt.Errorf("sched_setattr: %w", err)
	}
	defer s.Set(tid, withRuntime(a, 0))
	got, err := s.Get(tid)
	if err != nil {
		return 0, fmt.Errorf("sched_getattr: %w", err)
	}
	if got.Runtime != slice {
		return 0, unsupported(fmt.Errorf("asked for %d ns, the kernel reads back %d", slice, got.Runtime))
	}
	return a.Runtime, nil
}

func unsupported(why error) error {
	return fmt.Errorf("%w: this kernel (Linux %s) does not give SCHED_OTHER threads their own slice through sched_setattr's sched_runtime (%v); it needs Linux 6.12 or later",
		ErrUnsupported, release(), why)
}

func release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return strings.TrimRight(string(u.Release[:]), "\x00")
}
