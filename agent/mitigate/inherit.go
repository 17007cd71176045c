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
func (m *Mitigator) Inherit(start func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, so no
		// other goroutine runs on it with the slice.
		runtime.LockOSThread()
		tid := unix.Gettid()
		self := targets.Target{Kind: "self", Name: strconv.Itoa(tid), Threads: []targets.Thread{{TID: tid, VCPU: -1}}}
		m.Apply(targets.Event{Kind: targets.Added, Target: self})
		defer m.Apply(targets.Event{Kind: targets.Removed, Target: self})
		errc <- start()
	}()
	return <-errc
}
