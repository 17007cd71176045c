// Package procstat reads the kernel's own per-thread scheduling counters
// from /proc: time on CPU, time runnable but waiting (run_delay), how often
// the thread ran, and its voluntary and involuntary context switches.
//
// The kernel keeps these for every thread whatever the agent does, so
// reading them costs nothing per context switch: they are the agent's
// totals and rates, exact and continuous, while the BPF programs (which
// cost something at every switch) are attached only in trace windows for
// the distributions.
package procstat

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// Counters are cumulative since the thread started.
type Counters struct {
	RunNs       uint64 // time on CPU
	RunDelayNs  uint64 // time runnable, waiting for a CPU
	Timeslices  uint64 // times it was switched in
	Voluntary   uint64 // switch-outs to sleep (each ends with a wake-up)
	Involuntary uint64 // switch-outs while runnable: preemptions
}

// Read reads the counters of thread tid (any thread of the host, not only
// this process's). It needs a kernel with CONFIG_SCHED_INFO, which every
// distribution kernel has.
//
// schedstat is read by the tree's one reader of it (signal.ReadSchedstat),
// status by prometheus/procfs.
func Read(tid int) (Counters, error) {
	ss, err := signal.ReadSchedstat(fmt.Sprintf("/proc/%d/schedstat", tid))
	if err != nil {
		return Counters{}, fmt.Errorf("/proc/%d/schedstat: %w", tid, err)
	}
	st, err := Status(tid)
	if err != nil {
		return Counters{}, fmt.Errorf("/proc/%d/status: %w", tid, err)
	}
	return Counters{RunNs: uint64(ss.Run), RunDelayNs: uint64(ss.Delay), Timeslices: uint64(ss.Runs),
		Voluntary: st.VoluntaryCtxtSwitches, Involuntary: st.NonVoluntaryCtxtSwitches}, nil
}

// Status reads /proc/<tid>/status of any thread of the host: the one
// reader of that file for the agent's packages (the thread's process,
// owner, context switches).
func Status(tid int) (procfs.ProcStatus, error) {
	p, err := procfs.NewProc(tid)
	if err != nil {
		return procfs.ProcStatus{}, err
	}
	return p.NewStatus()
}

// Sub returns the counts accumulated between prev and c; a counter that
// went backwards (a recycled tid) counts as 0.
func (c Counters) Sub(prev Counters) Counters {
	return Counters{
		RunNs:       sub(c.RunNs, prev.RunNs),
		RunDelayNs:  sub(c.RunDelayNs, prev.RunDelayNs),
		Timeslices:  sub(c.Timeslices, prev.Timeslices),
		Voluntary:   sub(c.Voluntary, prev.Voluntary),
		Involuntary: sub(c.Involuntary, prev.Involuntary),
	}
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
