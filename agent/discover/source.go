package discover

import (
	"context"
	"strconv"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// MinEvery is the shortest scan period: a scan reads every process's
// executable link, so it is bounded in how often it runs, not only in
// what it costs.
const MinEvery = 2 * time.Second

// Source sends a target event for each VM that appears, changes or goes.
type Source struct {
	scan  *Scanner
	every time.Duration
	full  bool // the last scan left VMs out (logged when it starts)
}

var _ targets.Source = (*Source)(nil)

// NewSource returns a Source that scans every o.Every (at least MinEvery).
func NewSource(o Options) *Source {
	return &Source{scan: NewScanner(o), every: max(o.Every, MinEvery)}
}

// found is a target event with the process it is about.
type found struct {
	targets.Event
	pid     int
	libvirt bool // VM.Libvirt
}

// Run implements targets.Source: Added for every VM found by the first
// scan, then Added for new or changed VMs and Removed for those whose
// process ended (or that no longer have vCPU threads).
func (s *Source) Run(ctx context.Context) <-chan targets.Event {
	in := s.run(ctx)
	out := make(chan targets.Event)
	go func() {
		defer close(out)
		for f := range in {
			select {
			case out <- f.Event:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// bounded keeps at most MaxVMs of vms: those already sent first, then
// new ones by pid. A VM left out is counted at each scan it waits.
func (s *Source) bounded(vms []VM, sent map[int]targets.Target) []VM {
	if len(vms) <= MaxVMs {
		s.full = false
		return vms
	}
	out := make([]VM, 0, MaxVMs)
	for _, vm := range vms {
		if _, ok := sent[vm.PID]; ok {
			out = append(out, vm)
		}
	}
	left := 0
	for _, vm := range vms {
		if _, ok := sent[vm.PID]; !ok {
			if len(out) == MaxVMs {
				s.scan.limited(LimitVMs)
				left++
				continue
			}
			out = append(out, vm)
		}
	}
	if left > 0 && !s.full {
		s.scan.log.Warn().Int("max_vms", MaxVMs).Int("left_out", left).Msg("more VMs than are watched at once: the later ones wait for a slot")
	}
	s.full = left > 0
	return out
}

func (s *Source) run(ctx context.Context) <-chan found {
	out := make(chan found)
	go func() {
		defer close(out)
		last := map[int]targets.Target{} // by pid, as sent
		names := map[string]int{}        // target name -> pid
		send := func(f found) bool {
			select {
			case out <- f:
				return true
			case <-ctx.Done():
				return false
			}
		}
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			vms, err := s.scan.Scan()
			if err != nil {
				s.scan.log.Warn().Err(err).Msg("discovering VMs")
			} else {
				now := make(map[int]bool, len(vms))
				for _, vm := range vms {
					now[vm.PID] = true
				}
				for pid, tg := range last {
					if !now[pid] {
						delete(last, pid)
						delete(names, tg.Name)
						if !send(found{targets.Event{Kind: targets.Removed, Target: tg}, pid, false}) {
							return
						}
					}
				}
				for _, vm := range s.bounded(vms, last) {
					tg := vm.Target()
					if old, ok := last[vm.PID]; ok {
						tg.Name = old.Name // a VM keeps the name it was first sent with
					} else if other, taken := names[tg.Name]; taken && other != vm.PID {
						// Two VMs with one name (two QEMUs both -name vm):
						// the later one is told apart by its pid.
						tg.Name += "@" + strconv.Itoa(vm.PID)
					}
					if old, ok := last[vm.PID]; ok && old.Equal(tg) {
						continue
					}
					last[vm.PID], names[tg.Name] = tg, vm.PID
					s.scan.log.Info().Str("domain", tg.Name).Str("hypervisor", string(vm.Hypervisor)).Int("pid", vm.PID).
						Int("vcpus", len(vm.VCPUs)).Bool("qmp", vm.ByQMP).Msg("discovered VM")
					if !send(found{targets.Event{Kind: targets.Added, Target: tg}, vm.PID, vm.Libvirt}) {
						return
					}
				}
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
