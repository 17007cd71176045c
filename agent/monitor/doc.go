// Package monitor is the agent's core: it takes target events from
// discovery sources (libvirt, pids, cgroups), tells the BPF probe which
// threads to watch, samples the counters so distributions and rates can be
// computed over a recent window, keeps a bounded timeline of switch events,
// and builds snapshots with package model.
//
// ErrUnknownTarget is returned by Timeline for a name that is not watched.
package monitor
