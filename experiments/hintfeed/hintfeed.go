// Package hintfeed is the agent's hint pipeline (eBPF programs, monitor,
// publisher) run inside an experiment, wired as `vgpu-probe agent --hints`
// wires it: it publishes the hint page of each target it is told to
// watch, for as long as it watches it. bench watches one benchmark cell
// at a time; run --hints watches each runner domain of the libvirt
// backend.
package hintfeed

import (
	"context"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// Feed publishes hint pages; it needs root (it loads eBPF programs).
type Feed struct {
	kind    targets.Kind
	dir     string
	tempDir bool // made by Start, removed by Close
	probe   *bpfload.Probe
	mon     *monitor.Monitor
	pub     *hints.Publisher
	cancel  context.CancelFunc
	done    chan struct{}
	applied int // once closed: the switch-in records the publisher applied
}

// Start starts a feed that publishes the pages of targets of kind into
// dir; dir "" is a fresh directory (under hints.DefaultDir where there is
// one), removed by Close.
func Start(ctx context.Context, kind targets.Kind, dir string) (*Feed, error) {
	f := &Feed{kind: kind, dir: dir, done: make(chan struct{})}
	if dir == "" {
		base := hints.DefaultDir
		if _, err := os.Stat(base); err != nil {
			base = os.TempDir()
		}
		var err error
		if f.dir, err = os.MkdirTemp(base, "vgpu-probe-hints-"); err != nil {
			return nil, err
		}
		f.tempDir = true
	}
	var err error
	if f.pub, err = hints.New(hints.Options{Dir: f.dir, Log: zerolog.Nop()}); err == nil {
		f.probe, err = bpfload.Load(bpfload.Options{Events: true, WakeEveryEvent: true, Self: uint32(os.Getpid()), Log: zerolog.Nop()})
		if err != nil {
			f.pub.Close()
		}
	}
	if err != nil {
		f.removeDir()
		return nil, err
	}
	f.pub.SetCounters(f.probe)
	f.mon = monitor.New(f.probe, monitor.Options{Log: zerolog.Nop(), OnEvent: f.pub.OnEvent})
	ctx, f.cancel = context.WithCancel(ctx)
	go func() { defer close(f.done); f.mon.Run(ctx) }()
	go f.pub.Run(ctx)
	return f, nil
}

// Dir is where the pages are.
func (f *Feed) Dir() string { return f.dir }

// Path is the page of the target called name.
func (f *Feed) Path(name string) string { return f.pub.Path(name) }

// Watch publishes the page of the target called name, whose threads are
// tids (vCPU i on tids[i] for a domain), limited to quotaUS per periodUS
// (0: no limit); a target of the same name is replaced. Apply is
// synchronous: the threads are watched and the page is there when it
// returns.
func (f *Feed) Watch(name string, tids []int, quotaUS, periodUS int64) error {
	t := targets.Target{Kind: f.kind, Name: name, QuotaUS: quotaUS, PeriodUS: periodUS}
	for i, tid := range tids {
		vcpu := -1
		if f.kind == targets.KindDomain {
			vcpu = i
		}
		t.Threads = append(t.Threads, targets.Thread{TID: tid, VCPU: vcpu})
	}
	f.apply(targets.Event{Kind: targets.Added, Target: t})
	if _, err := os.Stat(f.Path(name)); err != nil {
		return fmt.Errorf("no hint page for %s: %w", name, err)
	}
	return nil
}

// Unwatch stops publishing the page of name and removes its file.
func (f *Feed) Unwatch(name string) {
	f.apply(targets.Event{Kind: targets.Removed, Target: targets.Target{Kind: f.kind, Name: name}})
}

func (f *Feed) apply(ev targets.Event) {
	f.pub.Apply(ev)
	f.mon.Apply(ev)
}

// Close stops the feed and removes what it made.
func (f *Feed) Close() {
	f.cancel()
	<-f.done
	f.applied = f.pub.Applied()
	f.pub.Close()
	f.probe.Close()
	f.removeDir()
}

// Applied is how many switch-in records the publisher applied, once
// closed.
func (f *Feed) Applied() int { return f.applied }

func (f *Feed) removeDir() {
	if f.tempDir {
		os.RemoveAll(f.dir)
	}
}
