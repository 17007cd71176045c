package hybridsync

import (
	"math/bits"
	"sync/atomic"
)

// KernelID names a kernel in the timing dictionary. 0 means "unknown kernel":
// nothing is learned or predicted for it.
type KernelID uint64

// Timing is one kernel's learned completion time, counted from its launch.
type Timing struct {
	Mean int64 // ns, exponentially weighted
	Dev  int64 // ns, mean absolute deviation (about 0.8 standard deviations)
	N    int   // samples, saturating at maxSamples
}

// Packing: mean (32 bits of ns, so up to 4.29 s), deviation (24 bits of ns,
// up to 16.7 ms) and sample count (8 bits) share one 64-bit word, so an
// update is one compare-and-swap and a reader never sees a mean from one
// update and a deviation from another. Longer kernels saturate: a kernel over
// 4 s is never worth spinning for, and a deviation over 16 ms makes any
// prediction useless for spinning anyway.
const (
	maxMean    = 1<<32 - 1
	maxDev     = 1<<24 - 1
	maxSamples = 1<<8 - 1
	// window is how many recent samples the average effectively spans once
	// warmed up: short enough to follow a workload that changes phase within
	// tens of calls, long enough that the 2-5% jitter of a kernel averages out.
	window = 16
)

func pack(t Timing) uint64 {
	return uint64(clamp(t.Mean, 0, maxMean))<<32 | uint64(clamp(t.Dev, 0, maxDev))<<8 | uint64(clamp(int64(t.N), 0, maxSamples))
}

func unpack(w uint64) Timing {
	return Timing{Mean: int64(w >> 32), Dev: int64(w >> 8 & maxDev), N: int(w & maxSamples)}
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// next folds one observation x (ns) into t: an exact running average for the
// first window samples, an exponentially weighted one after.
func (t Timing) next(x int64) Timing {
	n := min(t.N+1, maxSamples)
	w := int64(min(n, window))
	if t.N == 0 {
		return Timing{Mean: x, Dev: 0, N: n}
	}
	d := x - t.Mean
	ad := d
	if ad < 0 {
		ad = -ad
	}
	return Timing{Mean: t.Mean + d/w, Dev: t.Dev + (ad-t.Dev)/w, N: n}
}

// entry is one slot of the open-addressing table.
type entry struct {
	// key is 0 while the slot is free; it is set once, by CAS, and never
	// changes after, so a reader that saw it non-zero may rely on it.
	key    atomic.Uint64
	timing atomic.Uint64 // packed Timing; written only by CAS in Update
	stats  kernelCounters
	// oversleeps counts the waits in a row that slept to the prediction
	// and found the work already done (overslept); an exact sample resets it.
	oversleeps atomic.Uint32
}

// Dict is the per-kernel timing dictionary. It is tuned for one workload: a
// fixed, small set of kernels (tens to thousands) looked up and updated from
// many host threads, hundreds to tens of thousands of times per second. Reads
// and updates take no locks; the table has a fixed capacity chosen at
// construction, and a kernel that does not fit is simply not learned (Sync
// then treats it as unknown and blocks), so memory stays bounded whatever
// the application does.
//
// The zero value is not usable; use NewDict.
type Dict struct {
	slots []entry
	mask  uint64
	full  atomic.Uint64 // kernels turned away because the table was full
}

// DefaultDictSize is enough for every distinct kernel of NAMD or GROMACS
// (under a hundred each) with room for interposed apps that key kernels by
// function and grid shape.
const DefaultDictSize = 4096

// NewDict returns a dictionary that holds up to size kernels (rounded up to a
// power of two).
func NewDict(size int) *Dict {
	if size < 1 {
		size = 1
	}
	n := 1 << bits.Len(uint(size-1))
	return &Dict{slots: make([]entry, n), mask: uint64(n - 1)}
}

// hash spreads consecutive kernel ids (hs_kernel hands out 1, 2, 3...) and
// pointer-derived ids alike (Fibonacci hashing).
func hash(k KernelID) uint64 { return uint64(k) * 0x9E3779B97F4A7C15 }

// find returns k's slot, claiming a free one when create is set, or nil.
func (d *Dict) find(k KernelID, create bool) *entry {
	if k == 0 {
		return nil
	}
	h := hash(k)
	for i := uint64(0); i <= d.mask; i++ {
		e := &d.slots[(h+i)&d.mask]
		switch key := e.key.Load(); key {
		case uint64(k):
			return e
		case 0:
			if !create {
				return nil
			}
			if e.key.CompareAndSwap(0, uint64(k)) {
				return e
			}
			// Lost the race for this slot: another kernel (or this same
			// one, from another thread) took it. Check again.
			if e.key.Load() == uint64(k) {
				return e
			}
		}
	}
	if create {
		d.full.Add(1)
	}
	return nil
}

// Lookup returns k's timing; ok is false for a kernel never seen.
func (d *Dict) Lookup(k KernelID) (t Timing, ok bool) {
	e := d.find(k, false)
	if e == nil {
		return Timing{}, false
	}
	t = unpack(e.timing.Load())
	return t, t.N > 0
}

// Update folds one completion time x (ns from launch) into k's timing.
func (d *Dict) Update(k KernelID, x int64) {
	if e := d.find(k, true); e != nil {
		e.update(x)
	}
}

func (e *entry) update(x int64) {
	if e.oversleeps.Load() != 0 {
		e.oversleeps.Store(0)
	}
	for {
		old := e.timing.Load()
		if e.timing.CompareAndSwap(old, pack(unpack(old).next(x))) {
			return
		}
	}
}

// bound folds an upper bound u on the completion time into k's timing: the
// event was found complete u after launch, but it may have completed much
// earlier. Only a bound below the mean says something (the mean is too
// high), so only that is folded in; repeated, it walks an overestimate down
// until a spin observes the completion exactly.
func (e *entry) bound(u int64) {
	for {
		old := e.timing.Load()
		t := unpack(old)
		if t.N == 0 || u >= t.Mean {
			return
		}
		if e.timing.CompareAndSwap(old, pack(t.next(u))) {
			return
		}
	}
}

// atLeast folds a lower bound l on the completion time into k's timing
// (the work was still running l after launch), and reports whether it
// did: only a bound above the mean says something (the mean is too low),
// bound's counterpart.
func (e *entry) atLeast(l int64) bool {
	for {
		old := e.timing.Load()
		t := unpack(old)
		if t.N == 0 || l <= t.Mean {
			return false
		}
		if e.timing.CompareAndSwap(old, pack(t.next(l))) {
			return true
		}
	}
}

// forgetAfter: this many waits in a row that slept to the prediction and
// found the work done make the kernel's timing be forgotten. A sleep wakes
// 2*Dev plus the timer's lateness before the prediction, so such a wait
// only bounds the completion just under the mean, and bound walks a mean
// that is far too high down by about that much over window a wait, each
// wait sleeping to the wrong prediction (docs/tried.md: "Stale event
// records"). A right prediction is done at the wake-up only
// when the work ran more than 2*Dev short or the timer fired late, so
// three in a row almost only happen to a wrong one. Forgotten, the kernel
// is learned afresh: the next waits do not sleep, and their spins or
// blocking waits observe the completion exactly.
const forgetAfter = 3

// overslept folds the bound u of a wait that slept to the prediction and
// found the work already done, and forgets the timing after forgetAfter
// such waits in a row. A wake-up late by more than the timer's typical
// lateness finds a right prediction's work done too, but three in a row
// are rare (the typical lateness is the 75th percentile), and forgetting
// costs a right prediction only the few waits that relearn it, which spin
// on a free CPU (sleeping to a prediction happens only there).
func (e *entry) overslept(u int64) {
	if e.oversleeps.Add(1) < forgetAfter {
		e.bound(u)
		return
	}
	e.oversleeps.Store(0)
	// N = 0: nothing to predict from until relearned; the stats show the
	// bound meanwhile, the one thing known about the completion.
	e.timing.Store(pack(Timing{Mean: u}))
}

// Len returns how many kernels the dictionary holds.
func (d *Dict) Len() int {
	n := 0
	for i := range d.slots {
		if d.slots[i].key.Load() != 0 {
			n++
		}
	}
	return n
}

// Dropped returns how many times a new kernel was turned away because the
// dictionary was full.
func (d *Dict) Dropped() uint64 { return d.full.Load() }

// each calls f for every kernel in the dictionary, in slot order.
func (d *Dict) each(f func(KernelID, *entry)) {
	for i := range d.slots {
		e := &d.slots[i]
		if k := e.key.Load(); k != 0 {
			f(KernelID(k), e)
		}
	}
}
