package monitor

import (
	"cmp"
	"os"
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

// MaxCorunnerKeys is how many co-runner keys a target's totals name; the
// rest are summed as model.CorunnerOther. It bounds the metric series a
// target's co-runners cost.
const MaxCorunnerKeys = 5

// procRoot is where /proc is (a variable so tests can point it at a copy).
var procRoot = "/proc"

// attribution names the co-runners the BPF programs record by tgid with
// keys that outlive a command name: the name of a watched domain, or the
// cgroup path. All of it is guarded by Monitor.mu.
type attribution struct {
	// cgroups caches each co-runner's cgroup, read once while the process
	// lives (it is gone once it exits), dropped when the BPF map forgets
	// the tgid.
	cgroups map[uint32]string
	// admitted are, per target key, the co-runner keys given a name of
	// their own. A key once admitted stays, and the keys beyond the cap
	// always go to model.CorunnerOther, so every total only grows: a
	// ranking recomputed at each snapshot would move wait between keys and
	// make their counters go backwards.
	admitted map[string]map[string]bool
}

// keyOf returns the stable key of the task group tgid; domains maps the
// tgid of each watched domain's process to its name, self holds the
// processes of the target the co-runner took the CPU from.
func (a *attribution) keyOf(tgid uint32, domains map[uint32]string, self map[uint32]bool) string {
	if tgid == 0 {
		return model.CorunnerThrottled
	}
	if self[tgid] {
		return model.CorunnerSelf
	}
	if name, ok := domains[tgid]; ok {
		return name
	}
	if cg, ok := a.cgroups[tgid]; ok {
		return cg
	}
	cg, err := cgroupOf(int(tgid))
	if err != nil {
		// It exited before it was ever attributed.
		return model.CorunnerOther
	}
	if a.cgroups == nil {
		a.cgroups = map[uint32]string{}
	}
	a.cgroups[tgid] = cg
	return cg
}

// forget drops the cached cgroups of tgids no longer in the BPF map, and
// the admitted keys of targets no longer watched.
func (a *attribution) forget(byTID map[uint32][]bpfload.Corunner, live map[string]targets.Target) {
	seen := map[uint32]bool{}
	for _, cs := range byTID {
		for _, c := range cs {
			seen[c.TGID] = true
		}
	}
	for tgid := range a.cgroups {
		if !seen[tgid] {
			delete(a.cgroups, tgid)
		}
	}
	for k := range a.admitted {
		if _, ok := live[k]; !ok {
			delete(a.admitted, k)
		}
	}
}

// totals sums a target's co-runners by key, and caps the keys: the first
// MaxCorunnerKeys seen (the biggest first) keep their name for as long as
// the target is watched; the reserved keys always do.
func (a *attribution) totals(target string, cs []model.Corunner) []model.CorunnerWait {
	by := map[string]*model.CorunnerWait{}
	for _, c := range cs {
		w := by[c.Key]
		if w == nil {
			w = &model.CorunnerWait{Key: c.Key}
			by[c.Key] = w
		}
		w.Preemptions += c.Preemptions
		w.WaitedSeconds += c.WaitedSeconds
	}
	ranked := make([]*model.CorunnerWait, 0, len(by))
	for _, w := range by {
		ranked = append(ranked, w)
	}
	slices.SortFunc(ranked, func(x, y *model.CorunnerWait) int {
		return cmp.Or(cmp.Compare(y.WaitedSeconds, x.WaitedSeconds), cmp.Compare(x.Key, y.Key))
	})
	adm := a.admitted[target]
	if adm == nil {
		adm = map[string]bool{}
		if a.admitted == nil {
			a.admitted = map[string]map[string]bool{}
		}
		a.admitted[target] = adm
	}
	var out []model.CorunnerWait
	other := model.CorunnerWait{Key: model.CorunnerOther}
	capped := false
	for _, w := range ranked {
		reserved := w.Key == model.CorunnerThrottled || w.Key == model.CorunnerSelf
		if !adm[w.Key] && !reserved && w.Key != model.CorunnerOther && len(adm) < MaxCorunnerKeys {
			adm[w.Key] = true
		}
		if adm[w.Key] || reserved {
			out = append(out, *w)
			continue
		}
		capped = true
		other.Preemptions += w.Preemptions
		other.WaitedSeconds += w.WaitedSeconds
	}
	if capped {
		out = append(out, other)
	}
	slices.SortFunc(out, func(x, y model.CorunnerWait) int { return cmp.Compare(x.Key, y.Key) })
	return out
}

// domainTGIDs maps the processes of the watched domains to their names.
// Must be called with Monitor.mu held.
func (m *Monitor) domainTGIDs() map[uint32]string {
	out := map[uint32]string{}
	for _, t := range m.targets {
		if t.Kind != targets.KindDomain {
			continue
		}
		for tgid := range m.targetTGIDs(t) {
			out[tgid] = t.Name
		}
	}
	return out
}

// targetTGIDs are the processes of a target's watched threads. Must be
// called with Monitor.mu held.
func (m *Monitor) targetTGIDs(t targets.Target) map[uint32]bool {
	out := map[uint32]bool{}
	for _, th := range t.Threads {
		if w := m.watched[uint32(th.TID)]; w != nil && w.tgid != 0 {
			out[w.tgid] = true
		}
	}
	return out
}

// tgidOf reads the process a thread belongs to.
func tgidOf(tid int) (uint32, error) {
	st, err := procstat.Status(tid)
	return uint32(st.TGID), err
}

// cgroupOf reads the cgroup of a process: the unified (v2) hierarchy's
// path, else the v1 systemd one's, else the first listed.
func cgroupOf(pid int) (string, error) {
	ms, err := cgroups.Of(procRoot, pid)
	if err != nil {
		return "", err
	}
	return pickCgroup(ms)
}

// pickCgroup is the path that names a process's cgroup best.
func pickCgroup(ms []cgroups.Membership) (string, error) {
	var first, systemd string
	for _, m := range ms {
		if !strings.HasPrefix(m.Path, "/") {
			continue
		}
		switch {
		case m.Unified():
			return m.Path, nil
		case m.Has("name=systemd"):
			systemd = m.Path
		case first == "":
			first = m.Path
		}
	}
	if p := cmp.Or(systemd, first); p != "" {
		return p, nil
	}
	return "", os.ErrNotExist
}

// threadCorunners returns a thread's co-runners with their keys, the
// biggest first.
func (a *attribution) threadCorunners(cs []bpfload.Corunner, domains map[uint32]string, self map[uint32]bool) []model.Corunner {
	out := make([]model.Corunner, 0, len(cs))
	for _, c := range cs {
		out = append(out, model.Corunner{TGID: c.TGID, Comm: c.Comm, Key: a.keyOf(c.TGID, domains, self),
			Preemptions: c.Count, WaitedSeconds: float64(c.WaitedNs) / 1e9})
	}
	slices.SortFunc(out, func(x, y model.Corunner) int { return cmp.Compare(y.WaitedSeconds, x.WaitedSeconds) })
	return out
}
