package daemon

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

func domainIn(snap model.Snapshot, name string) *model.Target {
	for i := range snap.Targets {
		if snap.Targets[i].Kind == "domain" && snap.Targets[i].Name == name {
			return &snap.Targets[i]
		}
	}
	return nil
}

// End to end with the real libvirtd and QEMU: a transient domain is found,
// its vCPU threads are watched and measured with its <cputune> quota, and
// it is dropped (threads unwatched) when destroyed.
func TestLibvirtDomainIsWatchedAndDropped(t *testing.T) {
	l := libvirttest.Connect(t) // skips, saying why, without root or libvirtd
	p, m := watchLibvirt(t)

	d := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 2, PeriodUS: 100000, QuotaUS: 50000})
	var tg *model.Target
	deadline := time.Now().Add(30 * time.Second)
	for tg == nil || len(tg.Threads) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("domain %s not watched after 30s", d.Name)
		}
		time.Sleep(100 * time.Millisecond)
		snap := m.Snapshot()
		tg = domainIn(snap, d.Name)
	}
	// The guest boots: each vCPU runs once the guest brings it up, which
	// under TCG on a loaded 2-CPU machine can take seconds (the second one
	// had not run 1 s in, once).
	deadline = time.Now().Add(60 * time.Second)
	for {
		if tg = domainIn(m.Snapshot(), d.Name); tg == nil {
			t.Fatalf("domain %s gone while running", d.Name)
		}
		if allRan(tg.Threads) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if tg.QuotaUS != 50000 || tg.PeriodUS != 100000 {
		t.Errorf("cputune: quota %d period %d, want 50000/100000", tg.QuotaUS, tg.PeriodUS)
	}
	vcpus := map[int]bool{}
	var tids []uint32
	for _, th := range tg.Threads {
		t.Logf("vcpu %d tid %d: run %.3fs off %.3fs switches %d preempt %d run p50 %.0fus", th.VCPU, th.TID, th.RunSeconds, th.OffCPUSeconds, th.Switches, th.Preemptions, th.RunP50US)
		vcpus[th.VCPU] = true
		tids = append(tids, uint32(th.TID))
		if th.Switches == 0 || th.RunSeconds == 0 {
			t.Errorf("vcpu %d (tid %d) never seen running", th.VCPU, th.TID)
		}
	}
	if !vcpus[0] || !vcpus[1] {
		t.Errorf("vCPU indexes %v, want 0 and 1", vcpus)
	}

	if err := libvirttest.Destroy(d.Name); err != nil {
		t.Fatal(err)
	}
	// A destroyed domain stays in snapshots for a window, marked gone
	// with its measurements; it must leave the live ones.
	deadline = time.Now().Add(30 * time.Second)
	for domainIn(m.Snapshot().Live(), d.Name) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("domain %s still watched 30s after destroy", d.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if g := domainIn(m.Snapshot(), d.Name); g != nil && !g.Gone {
		t.Errorf("domain %s: in the snapshot after destroy but not marked gone", d.Name)
	}
	var s bpf.SchedThreadStats
	for _, tid := range tids {
		if err := p.Stats(tid, &s); !errors.Is(err, bpfload.ErrNotWatched) {
			t.Errorf("tid %d of the destroyed domain: %v, want it unwatched", tid, err)
		}
	}
}

// allRan reports whether every thread has been seen running.
func allRan(threads []model.Thread) bool {
	for _, th := range threads {
		if th.Switches == 0 || th.RunSeconds == 0 {
			return false
		}
	}
	return true
}

func waitDomain(t *testing.T, m *monitor.Monitor, name string, present bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for (domainIn(m.Snapshot(), name) != nil) != present {
		if time.Now().After(deadline) {
			t.Fatalf("domain %s: present=%v not reached after 60s", name, !present)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The agent keeps watching running domains while libvirtd restarts, and
// picks up domains started after it is back.
func TestLibvirtdRestart(t *testing.T) {
	l := libvirttest.Connect(t)
	_, m := watchLibvirt(t)

	before := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 1})
	waitDomain(t, m, before.Name, true)

	libvirttest.StopLibvirtd(t) // skips under systemd
	libvirttest.StartLibvirtd(t)
	l2 := libvirttest.Connect(t)
	after := libvirttest.StartDomain(t, l2, vmimages.Domain{VCPUs: 1})
	waitDomain(t, m, after.Name, true)
	if domainIn(m.Snapshot(), before.Name) == nil {
		t.Fatalf("domain %s, running all along, dropped across the libvirtd restart", before.Name)
	}
	th := domainIn(m.Snapshot(), before.Name).Threads
	if len(th) != 1 || th[0].Switches == 0 {
		t.Fatalf("domain %s threads after restart: %+v", before.Name, th)
	}
}

// watchLibvirt loads the real eBPF programs and runs a monitor on the
// test libvirtd's domains until the test ends.
func watchLibvirt(t *testing.T) (*bpfload.Probe, *monitor.Monitor) {
	t.Helper()
	p, err := bpfload.Load(bpfload.Options{Events: true, Log: zerolog.Nop()})
	if errors.Is(err, bpfload.ErrPermission) {
		t.Skipf("kernel does not let root load BPF: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	src, err := newLibvirtSource(libvirttest.Socket(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	m := monitor.New(p, monitor.Options{Log: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	// Run has returned before the probe closes: the cleanups run last
	// first.
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	events := src.Run(ctx)
	wg.Go(func() {
		for ev := range events {
			m.Apply(ev)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p, m
}
