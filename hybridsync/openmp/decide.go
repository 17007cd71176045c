// Package openmp decides OpenMP's wait settings (GNU libgomp's spin
// count, LLVM libomp's blocktime) by one rule, Decide: bounded on
// contended CPUs, the runtime's own on free ones. Three readings of
// contention apply it: the launcher's settings before the program starts
// (Launch, which hybridsync-run applies as they are), libgomp's spin
// followed while the program runs (OMPFollower) and libomp's blocktime
// set at the threads' reports (Blocktime, over hybridsync's Engine).
package openmp

import "strconv"

// Waits are OpenMP's wait settings: GNU libgomp's spin count
// (GOMP_SPINCOUNT, iterations) and LLVM libomp's blocktime (KMP_BLOCKTIME,
// ms); -1 leaves the runtime's own.
type Waits struct {
	Spin        int64
	BlocktimeMS int64
}

// Own leaves both runtimes' own settings.
var Own = Waits{Spin: -1, BlocktimeMS: -1}

// Bounded are the waits for contended CPUs: a spin of GompSpinBounded
// iterations (a pause and a load each, 10-40 ns: 10-40 µs, about a
// wake-up from another CPU on a GPU machine) before sleeping, and libomp's
// shortest blocktime. A longer spin suits a VM whose idle vCPUs take
// hundreds of µs to wake, not the GPU VMs measured (docs/libhybridsync.md,
// "The bound").
var Bounded = Waits{Spin: GompSpinBounded, BlocktimeMS: 0}

// Decide is the one rule of OpenMP's waits, which the launcher's probe
// (Launch), libgomp's follower (OMPFollower) and libomp's blocktime
// (Blocktime) all apply, each with its own reading of whether the
// program's CPUs are contended: on contended CPUs a thread at a barrier
// spins about as long as a wake-up costs (Bounded), since its spin burns
// the slice the team's other threads need; on free ones it waits as
// free says (the runtime's own, or what the program started with), since
// the long spin is what starts the next parallel region at once.
func Decide(contended bool, free Waits) Waits {
	if contended {
		return Bounded
	}
	return free
}

// env is w as environment words, NAME=VALUE, for the settings it fixes.
func (w Waits) env() []string {
	var out []string
	if w.Spin >= 0 {
		out = append(out, "GOMP_SPINCOUNT="+strconv.FormatInt(w.Spin, 10))
	}
	if w.BlocktimeMS >= 0 {
		out = append(out, "KMP_BLOCKTIME="+strconv.FormatInt(w.BlocktimeMS, 10))
	}
	return out
}
