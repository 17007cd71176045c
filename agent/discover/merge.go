package discover

import (
	"context"
	"strconv"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// Owner is a source that describes some VM processes itself (libvirt's):
// Merge gives its targets precedence over discovered ones.
type Owner interface {
	targets.Source
	// Synced is closed once the source's first listing can be asked with
	// Owns.
	Synced() <-chan struct{}
	// Owns reports whether the source describes the VM of process pid.
	Owns(pid int) bool
}

// settle is how long a newly discovered VM waits, when an Owner runs
// beside discovery, before it becomes a target of its own. A QEMU that a
// libvirtd started waits LibvirtSettle (exported for tests that wait it
// out): libvirt reports a domain only
// once it has set QEMU up through its monitor, seconds after QEMU made
// its vCPU threads; past that it is a libvirtd's the Owner does not see
// (KubeVirt's, in its pod). syncWait bounds the wait for the Owner's
// first listing (a libvirtd that does not answer must not hide the
// other VMs).
const (
	settle        = MinEvery
	LibvirtSettle = 30 * time.Second
	syncWait      = 10 * time.Second
)

// Merge sends the owner's events as they are and the discovered VMs that
// the owner does not describe (one VM is one target, never two, keyed by
// its process): a discovered VM the owner later reports is removed
// before the owner's target is added, and comes back if the owner drops
// it while its process lives. A discovered VM whose name is the name of
// one of the owner's targets is told apart by its pid.
func Merge(owner Owner, disc *Source) targets.Source {
	return &merged{owner: owner, disc: disc}
}

type merged struct {
	owner Owner
	disc  *Source
}

func (m *merged) Run(ctx context.Context) <-chan targets.Event {
	out := make(chan targets.Event)
	go m.loop(ctx, out)
	return out
}

// discVM is a discovered VM and what was sent for it.
type discVM struct {
	t      targets.Target // as discovered
	sent   *targets.Target
	seen   time.Time
	settle time.Duration
}

func (m *merged) loop(ctx context.Context, out chan<- targets.Event) {
	defer close(out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	oc := m.owner.Run(ctx)
	dc := m.disc.run(ctx)
	synced := m.owner.Synced()
	syncTimeout := time.After(syncWait)
	isSynced := false

	ownerPID := map[string]int{}   // owner target key -> its process
	ownerName := map[string]bool{} // owner target names
	vms := map[int]*discVM{}
	tick := time.NewTicker(settle / 2)
	defer tick.Stop()

	send := func(ev targets.Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	ownedBy := map[int]int{} // process -> how many owner targets name it
	owned := func(pid int) bool {
		return ownedBy[pid] > 0 || m.owner.Owns(pid)
	}
	retract := func(v *discVM) bool {
		if v.sent == nil {
			return true
		}
		ev := targets.Event{Kind: targets.Removed, Target: *v.sent}
		v.sent = nil
		return send(ev)
	}
	// offer sends a discovered VM's description when it is its own: a VM
	// not sent yet once it has settled and no owner claims it; one sent
	// when it changed (an owner that claims it later retracts it first).
	offer := func(pid int, v *discVM) bool {
		if v.sent == nil && (!isSynced || time.Since(v.seen) < v.settle || owned(pid)) {
			return true
		}
		t := v.t
		if v.sent != nil {
			t.Name = v.sent.Name
		} else if ownerName[t.Name] {
			t.Name += "@" + strconv.Itoa(pid)
		}
		if v.sent != nil && v.sent.Equal(t) {
			return true
		}
		v.sent = &t
		return send(targets.Event{Kind: targets.Added, Target: t})
	}
	offerAll := func() bool {
		for pid, v := range vms {
			if !offer(pid, v) {
				return false
			}
		}
		return true
	}

	for oc != nil || dc != nil {
		select {
		case <-ctx.Done():
			return
		case <-synced:
			synced, isSynced = nil, true
			if !offerAll() {
				return
			}
		case <-syncTimeout:
			syncTimeout, isSynced = nil, true
			if !offerAll() {
				return
			}
		case <-tick.C:
			if !offerAll() {
				return
			}
		case ev, ok := <-oc:
			if !ok {
				oc = nil
				continue
			}
			key := ev.Target.Key()
			if old, ok := ownerPID[key]; ok {
				if ownedBy[old]--; ownedBy[old] <= 0 {
					delete(ownedBy, old)
				}
			}
			if ev.Kind == targets.Removed {
				pid := ownerPID[key]
				delete(ownerPID, key)
				delete(ownerName, ev.Target.Name)
				if !send(ev) {
					return
				}
				if v := vms[pid]; v != nil {
					// A domain libvirt stopped is a process about to
					// exit: it becomes a target of its own only if it
					// is still there after a settle.
					v.seen = time.Now()
				}
				continue
			}
			pid := processOf(ev.Target)
			ownerPID[key], ownerName[ev.Target.Name] = pid, true
			ownedBy[pid]++
			if v := vms[pid]; v != nil && !retract(v) {
				return
			}
			if !send(ev) {
				return
			}
		case f, ok := <-dc:
			if !ok {
				dc = nil
				continue
			}
			if f.Kind == targets.Removed {
				if v := vms[f.pid]; v != nil {
					delete(vms, f.pid)
					if !retract(v) {
						return
					}
				}
				continue
			}
			v := vms[f.pid]
			if v == nil {
				v = &discVM{seen: time.Now(), settle: settle}
				if f.libvirt {
					v.settle = LibvirtSettle
				}
				vms[f.pid] = v
			}
			v.t = f.Target
			if !offer(f.pid, v) {
				return
			}
		}
	}
}

// processOf is the process of an owner's target: its helper (libvirt's
// QEMU main thread) or the thread group of its first thread.
func processOf(t targets.Target) int {
	if len(t.Helpers) > 0 {
		return t.Helpers[0]
	}
	if len(t.Threads) > 0 {
		if st, err := procstat.Status(t.Threads[0].TID); err == nil {
			return st.TGID
		}
	}
	return 0
}
