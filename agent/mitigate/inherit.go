package mitigate

import (
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// Inherit runs start on a thread of this process that has the slice, and
// returns what start returns. Custom slices survive fork, clone and exec
// (unless SCHED_FLAG_RESET_ON_FORK), so a process that start forks, and
// every thread that process makes, has the slice from its first
// instruction: nothing needs re-discovering. The benchmark uses it for
// its cell processes.
//
// The thread is given back to the runtime once its slice is restored, and
// ends with the goroutine only where the restore failed (so that no other
// goroutine runs with the slice). Ending it is not harmless: a child that
// any goroutine started earlier from this thread with Pdeathsig (as
// internal/reexec's co-runners are) is killed when the thread exits,
// and Go may well have run that earlier goroutine on it.
func (m *Mitigator) Inherit(start func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		self := targets.Target{Kind: "self", Name: strconv.Itoa(tid), Threads: []targets.Thread{{TID: tid, VCPU: -1}}}
		m.apply(targets.Event{Kind: targets.Added, Target: self}, true)
		err := start()
		m.apply(targets.Event{Kind: targets.Removed, Target: self}, true)
		if m.restored(tid) {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// restored reports whether tid no longer runs with the mitigation's slice.
func (m *Mitigator) restored(tid int) bool {
	a, err := m.sched.Get(tid)
	return err == nil && a.Runtime != m.slice
}
