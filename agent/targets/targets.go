package targets

import (
	"context"
	"slices"
)

// Kind is the kind of a target, as it appears in snapshots.
type Kind string

const (
	KindDomain Kind = "domain"
	KindPID    Kind = "pid"
	KindCgroup Kind = "cgroup"
)

// Thread is one thread to measure.
type Thread struct {
	TID int
	// VCPU is the vCPU index the thread runs, or -1 when it is not a vCPU
	// thread (or the source cannot tell).
	VCPU int
	// CPUs the thread is pinned to; nil when unknown or unpinned.
	CPUs []int
}

// Target is one VM, process or cgroup.
type Target struct {
	Kind Kind
	// Name is unique within a Kind: the domain name, the pid, the cgroup
	// path.
	Name    string
	Threads []Thread
	// Helpers are threads that serve Threads without being measured: a
	// domain's QEMU main thread, whose main loop runs the emulated timers
	// and devices (under TCG it injects the interrupt that wakes a halted
	// vCPU). Only the mitigation acts on them.
	Helpers []int
	// PeriodUS and QuotaUS are the CPU bandwidth limit (0 when none).
	PeriodUS, QuotaUS int64
}

// Key identifies a target across events.
func (t Target) Key() string { return string(t.Kind) + "/" + t.Name }

// Equal reports whether two descriptions of a target are the same.
func (t Target) Equal(o Target) bool {
	return t.Kind == o.Kind && t.Name == o.Name && t.PeriodUS == o.PeriodUS && t.QuotaUS == o.QuotaUS &&
		slices.Equal(t.Helpers, o.Helpers) &&
		slices.EqualFunc(t.Threads, o.Threads, func(a, b Thread) bool {
			return a.TID == b.TID && a.VCPU == b.VCPU && slices.Equal(a.CPUs, b.CPUs)
		})
}

// EventKind says whether a target appeared (or changed) or went away.
type EventKind int

const (
	// Added: a new target, or a new description of a known one (threads
	// came or went); the latest Added replaces earlier ones.
	Added EventKind = iota
	// Removed: the target is gone; stop watching its threads.
	Removed
)

// Event is one change of the set of targets.
type Event struct {
	Kind   EventKind
	Target Target
}

// Source is anything that discovers targets: Run sends Added for what
// exists now, then changes, and closes the channel when ctx is done.
type Source interface {
	Run(ctx context.Context) <-chan Event
}
