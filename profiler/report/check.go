package report

import (
	"fmt"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/input"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
)

// field is a number of an input and its name there.
type field struct {
	name string
	v    float64
}

// upTo wants each field between 0 and hi; at prefixes their names.
func upTo(c *input.Check, at string, hi float64, fs ...field) {
	for _, f := range fs {
		c.Range(at+f.name, f.v, 0, hi)
	}
}

// checkStats wants times that are times and, for every kernel and for
// all together, no more waits ended by spinning, sleeping or blocking
// than there were calls (percentages over 100 otherwise).
func checkStats(s *hybridsync.Stats) error {
	var c input.Check
	checkCounts(&c, "", s.Counts)
	checkCounts(&c, "unknown_kernels.", s.UnknownKernels)
	upTo(&c, "", input.MaxUS,
		field{"timer_late_us", s.TimerLateUS}, field{"timer_late_dev_us", s.TimerLateDevUS}, field{"timer_late_p75_us", s.TimerLateP75US},
		field{"wake_late_us", s.WakeLateUS}, field{"wake_late_dev_us", s.WakeLateDevUS}, field{"wake_late_p75_us", s.WakeLateP75US},
		field{"slice_us", s.SliceUS})
	for i, k := range s.Kernels {
		at := fmt.Sprintf("kernels[%d].", i)
		upTo(&c, at, input.MaxUS, field{"mean_us", k.MeanUS}, field{"dev_us", k.DevUS})
		checkCounts(&c, at, k.Counts)
	}
	return c.Err()
}

func checkCounts(c *input.Check, at string, n hybridsync.Counts) {
	upTo(c, at, input.MaxSeconds,
		field{"spin_seconds", n.SpinSeconds}, field{"sleep_seconds", n.SleepSeconds}, field{"block_seconds", n.BlockSeconds})
	// Ready is left out: the C library counts waits on unknown kernels
	// that were already complete without counting them as calls. The sum
	// is a float's because a uint64 one could wrap around.
	if ended := float64(n.SpinHits) + float64(n.SleepSpinHits) + float64(n.Blocks); ended > float64(n.Calls) {
		c.Failf("%sspin_hits + sleep_spin_hits + blocks = %.0f, more than %scalls = %d", at, ended, at, n.Calls)
	}
}

// checkSnapshot checks s, whose fields are named with the prefix at.
func checkSnapshot(c *input.Check, at string, s *agentapi.Snapshot) {
	upTo(c, at, input.MaxSeconds, field{"window_seconds", s.WindowSeconds})
	for i, t := range s.Targets {
		tat := fmt.Sprintf("%stargets[%d].", at, i)
		upTo(c, tat, input.MaxUS, field{"period_us", float64(t.PeriodUS)}, field{"quota_us", float64(t.QuotaUS)})
		for j, th := range t.Threads {
			checkThread(c, fmt.Sprintf("%sthreads[%d].", tat, j), th)
		}
	}
}

func checkThread(c *input.Check, at string, th agentapi.Thread) {
	c.Range(at+"vcpu", float64(th.VCPU), -1, input.MaxCount) // -1: not a vCPU
	upTo(c, at, input.MaxSeconds,
		field{"run_seconds", th.RunSeconds}, field{"offcpu_seconds", th.OffCPUSeconds}, field{"runnable_wait_seconds", th.RunnableWaitSeconds})
	upTo(c, at, input.MaxUS,
		field{"run_p50_us", th.RunP50US}, field{"offcpu_p50_us", th.OffCPUP50US}, field{"offcpu_p99_us", th.OffCPUP99US},
		field{"wake_p50_us", th.WakeP50US}, field{"wake_p99_us", th.WakeP99US}, field{"slice_p50_us", th.SliceP50US})
	upTo(c, at, input.MaxRate, field{"preemptions_per_second", th.PreemptionsPerSecond})
	upTo(c, at, 1, field{"steal_fraction", th.StealFraction})
	for k, co := range th.Corunners {
		upTo(c, fmt.Sprintf("%scorunners[%d].", at, k), input.MaxSeconds, field{"waited_seconds", co.WaitedSeconds})
	}
}
