package run

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/experiments/backend/libvirt"
)

// checkHints rejects --hints where it cannot work, before anything starts:
// the page reaches a guest only through libvirt's <shmem>, and publishing
// it loads the agent's eBPF programs.
func (o *Options) checkHints() error {
	if !o.Hints {
		return nil
	}
	if o.Backend != "libvirt" {
		return errors.New("--hints is for --backend libvirt (the page reaches the runner's guest through its ivshmem device)")
	}
	if os.Geteuid() != 0 {
		return errors.New("--hints publishes the hint page with the agent's eBPF programs, which needs root")
	}
	return hints.CheckDir(hints.DefaultDir)
}

// hintFeed is the agent's hint pipeline (eBPF programs, monitor,
// publisher) in-process, wired as `vgpu-probe agent --hints /dev/shm`
// wires it, publishing the page of each runner domain while it lives. It
// runs beside the --with-agent agent rather than inside it: that one
// watches only the agent's extra run of each cell, the page must be there
// for every run.
type hintFeed struct {
	probe  *bpfload.Probe
	mon    *monitor.Monitor
	pub    *hints.Publisher
	cancel context.CancelFunc
	done   chan struct{}
}

var _ libvirt.HintPublisher = (*hintFeed)(nil)

func startHintFeed(ctx context.Context) (*hintFeed, error) {
	f := &hintFeed{done: make(chan struct{})}
	var err error
	if f.pub, err = hints.New(hints.Options{Dir: hints.DefaultDir, Log: zerolog.Nop()}); err != nil {
		return nil, fmt.Errorf("--hints: %w", err)
	}
	if f.probe, err = bpfload.Load(bpfload.Options{Events: true, WakeEveryEvent: true, Self: uint32(os.Getpid()), Log: zerolog.Nop()}); err != nil {
		return nil, fmt.Errorf("--hints: %w", err)
	}
	f.pub.SetCounters(f.probe)
	f.mon = monitor.New(f.probe, monitor.Options{Log: zerolog.Nop(), OnEvent: f.pub.OnEvent})
	ctx, f.cancel = context.WithCancel(ctx)
	go func() { defer close(f.done); f.mon.Run(ctx) }()
	go f.pub.Run(ctx)
	return f, nil
}

// Watch publishes the page of domain, whose vCPU i runs on host thread
// tids[i], into the file QEMU made for its <shmem>. Apply is synchronous:
// the page is there when it returns.
func (f *hintFeed) Watch(domain string, tids []int, quotaUS, periodUS int64) error {
	ev := targets.Event{Kind: targets.Added, Target: domainTarget(domain, tids, quotaUS, periodUS)}
	f.pub.Apply(ev)
	f.mon.Apply(ev)
	if _, err := os.Stat(f.pub.Path(domain)); err != nil {
		return fmt.Errorf("--hints: no hint page for domain %s: %w", domain, err)
	}
	return nil
}

// Unwatch stops publishing the page of domain and removes its file.
func (f *hintFeed) Unwatch(domain string) {
	ev := targets.Event{Kind: targets.Removed, Target: domainTarget(domain, nil, 0, 0)}
	f.pub.Apply(ev)
	f.mon.Apply(ev)
}

func domainTarget(domain string, tids []int, quotaUS, periodUS int64) targets.Target {
	t := targets.Target{Kind: targets.KindDomain, Name: domain, QuotaUS: quotaUS, PeriodUS: periodUS}
	for i, tid := range tids {
		t.Threads = append(t.Threads, targets.Thread{TID: tid, VCPU: i})
	}
	return t
}

func (f *hintFeed) close() {
	f.cancel()
	<-f.done
	f.pub.Close()
	f.probe.Close()
}
