// Package hintfeed is the agent run inside an experiment, assembled as
// `vgpu-probe agent --hints DIR --mitigate slice=...` is (agent/assembly,
// one assembly for both): for each
// target it is told to watch, for as long as it watches it, it publishes
// the target's hint page (eBPF programs, monitor, publisher) and gives
// the target's threads the short EEVDF slice, whose length each thread's
// slot then carries. Either part may be off. bench watches one benchmark
// cell at a time; apps each program of the suite; run --hints and run
// --mitigate each runner domain of the libvirt backend.
package hintfeed

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/assembly"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// Options configures a Feed.
type Options struct {
	// Kind is the kind of the targets watched (domain: vCPU i is the
	// i-th thread given to Watch).
	Kind targets.Kind
	// Hints publishes each watched target's hint page; it needs root
	// (the agent's eBPF programs).
	Hints bool
	// Dir is where pages go; "" is a fresh directory (under
	// hints.DefaultDir where there is one), removed by Close.
	Dir string
	// Mitigation, when set, gives the threads of each watched target the
	// slice while it is watched (and, through Inherit, processes from
	// their start); a page then carries each thread's slice in its slot.
	Mitigation *mitigate.Config
}

// Feed is the agent's hint pages and mitigation, in-process.
type Feed struct {
	kind    targets.Kind
	dir     string
	tempDir bool // made by Start, removed by Close
	a       *assembly.Agent

	mu       sync.Mutex
	watchers map[string]*rescan // WatchProcess's, by name
}

// rescan is one WatchProcess's re-scanning of a process's threads.
type rescan struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the re-scan and waits for it, so that no Added it was about
// to apply comes after what the caller applies next.
func (r *rescan) stop() {
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// Start starts a feed. With Mitigation it first refuses a kernel without
// custom slices; with Hints it loads the eBPF programs.
func Start(ctx context.Context, o Options) (*Feed, error) {
	f := &Feed{kind: o.Kind, dir: o.Dir, watchers: map[string]*rescan{}}
	if o.Hints && f.dir == "" {
		base := hints.DefaultDir
		if _, err := os.Stat(base); err != nil {
			base = os.TempDir()
		}
		var err error
		// Not named like a page: in the agent's directory the page
		// names are the targets'.
		if f.dir, err = os.MkdirTemp(base, "vgpu-probe-feed-"); err != nil {
			return nil, fmt.Errorf("--hints: %w", err)
		}
		f.tempDir = true
	}
	ao := assembly.Options{Log: zerolog.Nop(), Mitigation: o.Mitigation, MonitorOptions: monitor.Options{Log: zerolog.Nop()},
		// Unprivileged, a feed only mitigates the processes it starts
		// (Inherit) and cannot write the agent's state directory.
		NoState: os.Geteuid() != 0}
	if o.Hints {
		// The programs run for the pages anyway: the slice follows the
		// same verdict as the host agent's, set only while another
		// process competes for the thread's CPU.
		ao.Hints, ao.GateMitigation = f.dir, true
	}
	var err error
	if f.a, err = assembly.Start(ctx, ao); err != nil {
		f.removeDir()
		return nil, err
	}
	return f, nil
}

// Hints reports whether the feed publishes pages (false for a nil Feed).
func (f *Feed) Hints() bool { return f != nil && f.a.Publisher() != nil }

// Mitigates reports whether the feed gives watched threads the slice
// (false for a nil Feed).
func (f *Feed) Mitigates() bool { return f != nil && f.a.Mitigator() != nil }

// Dir is where the pages are ("" without hints).
func (f *Feed) Dir() string {
	if !f.Hints() {
		return ""
	}
	return f.dir
}

// Path is the page of the target called name ("" without hints).
func (f *Feed) Path(name string) string {
	if !f.Hints() {
		return ""
	}
	return f.a.Publisher().Path(name)
}

// Inherit runs start (which starts a process) from a thread with the
// slice when the feed mitigates, so that the process and every thread it
// makes have it from their first instruction (mitigate.Mitigator.Inherit);
// otherwise it just runs start. The thread goes back to the runtime when
// start returns (ending only if its slice could not be restored, and with
// it a process started there with Pdeathsig), so start should also wait
// for the process it starts.
func (f *Feed) Inherit(start func() error) error {
	if !f.Mitigates() {
		return start()
	}
	return f.a.Mitigator().Inherit(start)
}

// Watch watches the target called name, whose threads are tids (vCPU i
// on tids[i] for a domain), limited to quotaUS per periodUS (0: no
// limit); a target of the same name is replaced. It is synchronous: the
// threads have the slice and the page is there when it returns.
func (f *Feed) Watch(name string, tids []int, quotaUS, periodUS int64) error {
	t := targets.Target{Kind: f.kind, Name: name, QuotaUS: quotaUS, PeriodUS: periodUS}
	for i, tid := range tids {
		vcpu := -1
		if f.kind == targets.KindDomain {
			vcpu = i
		}
		t.Threads = append(t.Threads, targets.Thread{TID: tid, VCPU: vcpu})
	}
	if f.kind == targets.KindDomain && len(tids) > 0 {
		// QEMU's main thread (the vCPU threads' process) runs the
		// emulator's main loop, as the agent's libvirt targets say.
		if st, err := procstat.Status(tids[0]); err == nil && st.TGID > 0 {
			t.Helpers = []int{st.TGID}
		}
	}
	return f.watch(t)
}

func (f *Feed) watch(t targets.Target) error {
	f.a.Apply(targets.Event{Kind: targets.Added, Target: t})
	if !f.Hints() {
		return nil
	}
	if _, err := os.Stat(f.Path(t.Name)); err != nil {
		return fmt.Errorf("no hint page for %s: %w", t.Name, err)
	}
	return nil
}

// RescanEvery is how often WatchProcess looks for threads that started or
// ended.
const RescanEvery = 50 * time.Millisecond

// WatchProcess watches every thread of process pid and of the processes
// it started (a wrapper's engine: GROMACS's mdrun under gromacs.py) as the
// target called name: threads are looked for again every RescanEvery
// until Unwatch or until the process exits. The threads at the call are
// watched when it returns.
func (f *Feed) WatchProcess(name string, pid int, quotaUS, periodUS int64) error {
	src, err := targets.NewProcessTree(pid, RescanEvery)
	if err != nil {
		return err
	}
	t, err := src.Scan()
	if err != nil {
		return err
	}
	relabel := func(t targets.Target) targets.Target {
		t.Kind, t.Name, t.QuotaUS, t.PeriodUS = f.kind, name, quotaUS, periodUS
		return t
	}
	if err := f.watch(relabel(t)); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rescan{cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	old := f.watchers[name]
	f.watchers[name] = r
	f.mu.Unlock()
	old.stop()
	go func() {
		defer close(r.done)
		for ev := range src.Run(ctx) {
			// Removed (the process exited) is left to Unwatch, which
			// the caller makes once it has its result.
			if ev.Kind == targets.Added && ctx.Err() == nil {
				f.a.Apply(targets.Event{Kind: targets.Added, Target: relabel(ev.Target)})
			}
		}
	}()
	return nil
}

// Unwatch stops watching name: its threads get their slices back and its
// page file is removed.
func (f *Feed) Unwatch(name string) {
	f.mu.Lock()
	r := f.watchers[name]
	delete(f.watchers, name)
	f.mu.Unlock()
	r.stop()
	f.a.Apply(targets.Event{Kind: targets.Removed, Target: targets.Target{Kind: f.kind, Name: name}})
}

// Close stops the feed, puts back the slices it set and removes what it
// made.
func (f *Feed) Close() error {
	f.mu.Lock()
	rs := f.watchers
	f.watchers = map[string]*rescan{}
	f.mu.Unlock()
	for _, r := range rs {
		r.stop()
	}
	err := f.a.Close()
	f.removeDir()
	return err
}

// Applied is how many switch-in records the publisher applied, once
// closed.
func (f *Feed) Applied() int { return f.a.Applied() }

func (f *Feed) removeDir() {
	if f.tempDir {
		os.RemoveAll(f.dir)
	}
}
