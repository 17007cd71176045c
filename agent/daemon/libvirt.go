package daemon

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/libvirt"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// libvirtSource adapts agent/libvirt's domain events to targets.
type libvirtSource struct{ w *libvirt.Watcher }

var _ targets.Source = (*libvirtSource)(nil)

func newLibvirtSource(uri string, log zerolog.Logger) (targets.Source, error) {
	w, err := libvirt.NewWatcher(uri, log)
	if err != nil {
		return nil, fmt.Errorf("connecting to libvirtd: %w", err)
	}
	return &libvirtSource{w: w}, nil
}

// Synced and Owns let discovery leave libvirt's domains to it.
func (s *libvirtSource) Synced() <-chan struct{} { return s.w.Synced() }

// Owns reports whether pid is the QEMU of a domain libvirt reported.
func (s *libvirtSource) Owns(pid int) bool {
	for _, d := range s.w.Domains() {
		if d.PID == pid {
			return true
		}
	}
	return false
}

// Close releases the watcher's first connection if Run never took it.
func (s *libvirtSource) Close() { s.w.Close() }

func (s *libvirtSource) Run(ctx context.Context) <-chan targets.Event {
	in := s.w.Run(ctx)
	out := make(chan targets.Event)
	go func() {
		defer close(out)
		for ev := range in {
			te := targets.Event{Kind: targets.Added, Target: domainTarget(ev.Domain)}
			if ev.Kind == libvirt.Removed {
				te.Kind = targets.Removed
			}
			select {
			case out <- te:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func domainTarget(d libvirt.Domain) targets.Target {
	t := targets.Target{Kind: targets.KindDomain, Name: d.Name, PeriodUS: d.PeriodUS, QuotaUS: d.QuotaUS}
	for _, v := range d.VCPUs {
		t.Threads = append(t.Threads, targets.Thread{TID: v.TID, VCPU: v.Index, CPUs: v.CPUs})
	}
	if d.PID > 0 {
		t.Helpers = []int{d.PID} // QEMU's main thread: its main loop
	}
	return t
}
