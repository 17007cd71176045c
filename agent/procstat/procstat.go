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
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// ErrFormat is wrapped when a /proc file does not parse.
var ErrFormat = errors.New("unexpected format")

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
func Read(tid int) (Counters, error) {
	var c Counters
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/schedstat")
	if err != nil {
		return c, err
	}
	if c.RunNs, c.RunDelayNs, c.Timeslices, err = ParseSchedstat(b); err != nil {
		return c, fmt.Errorf("/proc/%d/schedstat: %w", tid, err)
	}
	b, err = os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return c, err
	}
	if c.Voluntary, c.Involuntary, err = ParseStatus(b); err != nil {
		return c, fmt.Errorf("/proc/%d/status: %w", tid, err)
	}
	return c, nil
}

// ParseSchedstat parses /proc/<tid>/schedstat: "RUN_NS DELAY_NS SLICES\n".
func ParseSchedstat(b []byte) (runNs, delayNs, slices uint64, err error) {
	f := bytes.Fields(b)
	if len(f) != 3 {
		return 0, 0, 0, fmt.Errorf("%w: want 3 fields, got %d", ErrFormat, len(f))
	}
	var v [3]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(string(f[i]), 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("%w: field %d: %v", ErrFormat, i+1, err)
		}
	}
	return v[0], v[1], v[2], nil
}

// ParseStatus takes the context switch counts from /proc/<tid>/status.
func ParseStatus(b []byte) (voluntary, involuntary uint64, err error) {
	var seen int
	for line := range bytes.Lines(b) {
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "voluntary_ctxt_switches":
			dst = &voluntary
		case "nonvoluntary_ctxt_switches":
			dst = &involuntary
		default:
			continue
		}
		n, perr := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("%w: %s: %v", ErrFormat, key, perr)
		}
		*dst = n
		seen++
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("%w: no context switch counts", ErrFormat)
	}
	return voluntary, involuntary, nil
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
