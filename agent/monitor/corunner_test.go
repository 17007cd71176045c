package monitor

import (
	"os"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

func TestParseCgroup(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"0::/system.slice/sshd.service\n", "/system.slice/sshd.service"},
		// Hybrid v1 + v2: the unified line wins wherever it is.
		{"12:cpu,cpuacct:/user.slice\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n0::/user.slice/user-0.slice/session-3.scope\n", "/user.slice/user-0.slice/session-3.scope"},
		// Pure v1: systemd's hierarchy names the unit.
		{"4:cpu,cpuacct:/docker/abc\n1:name=systemd:/system.slice/docker-abc.scope\n", "/system.slice/docker-abc.scope"},
		{"4:cpu,cpuacct:/docker/abc\n", "/docker/abc"},
	} {
		got, err := pickCgroup(cgroups.Parse([]byte(c.in)))
		if err != nil || got != c.want {
			t.Errorf("pickCgroup(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "garbage\n", "0::relative\n"} {
		if got, err := pickCgroup(cgroups.Parse([]byte(bad))); err == nil {
			t.Errorf("pickCgroup(%q) = %q, want an error", bad, got)
		}
	}
}

// TestCorunnerKeys attributes real processes: this test's own process as
// a watched domain's, by its name, and as anything else, by its cgroup.
func TestCorunnerKeys(t *testing.T) {
	self := uint32(os.Getpid())
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no /proc/self/cgroup: %v", err)
	}
	cg, err := pickCgroup(cgroups.Parse(b))
	if err != nil {
		t.Fatal(err)
	}
	tgid, err := tgidOf(os.Getpid())
	if err != nil || tgid != self {
		t.Fatalf("tgidOf(self) = %d, %v; want %d", tgid, err, self)
	}
	m := New(nil, Options{})
	live := map[string]targets.Target{"domain/guest2": {Kind: targets.KindDomain, Name: "guest2",
		Threads: []targets.Thread{{TID: os.Getpid(), VCPU: 0}}}}
	m.targets = live
	m.watched[self] = &watch{refs: 1, tgid: tgid}
	domains := m.domainTGIDs()
	if domains[self] != "guest2" {
		t.Fatalf("domainTGIDs = %v, want %d: guest2", domains, self)
	}
	var a attribution
	for _, c := range []struct {
		tgid    uint32
		domains map[uint32]string
		self    map[uint32]bool
		want    string
	}{
		{0, nil, nil, model.CorunnerThrottled},
		{self, domains, nil, "guest2"},
		{self, domains, map[uint32]bool{self: true}, model.CorunnerSelf},
		{self, nil, nil, cg},
		{1 << 30, nil, nil, model.CorunnerOther}, // no such process
	} {
		if got := a.keyOf(c.tgid, c.domains, c.self); got != c.want {
			t.Errorf("keyOf(%d) = %q, want %q", c.tgid, got, c.want)
		}
	}
	if !strings.HasPrefix(cg, "/") {
		t.Errorf("cgroup key %q does not start with /", cg)
	}
	// The cache outlives nothing the BPF map forgot.
	a.forget(map[uint32][]bpfload.Corunner{}, live)
	if len(a.cgroups) != 0 {
		t.Errorf("cgroup cache kept %v", a.cgroups)
	}
}

// TestCorunnerTotalsCap: keys are summed over threads, capped, and the
// admitted keys stay, so no total ever goes down when the ranking
// changes.
func TestCorunnerTotalsCap(t *testing.T) {
	var a attribution
	cs := []model.Corunner{{Key: model.CorunnerThrottled, Preemptions: 1, WaitedSeconds: 0.1},
		{Key: model.CorunnerSelf, Preemptions: 1, WaitedSeconds: 0.1}}
	for i := range MaxCorunnerKeys + 2 {
		key := "/k" + string(rune('a'+i))
		// Two threads behind the same key: summed.
		cs = append(cs, model.Corunner{Key: key, Preemptions: 1, WaitedSeconds: float64(10 - i)},
			model.Corunner{Key: key, Preemptions: 1, WaitedSeconds: 1})
	}
	first := a.totals("domain/vm1", cs)
	if len(first) != MaxCorunnerKeys+3 {
		t.Fatalf("%d keys, want %d named + throttled + self + other: %+v", len(first), MaxCorunnerKeys, first)
	}
	byKey := map[string]model.CorunnerWait{}
	for _, w := range first {
		byKey[w.Key] = w
	}
	if w := byKey["/ka"]; w.WaitedSeconds != 11 || w.Preemptions != 2 {
		t.Errorf("/ka = %+v, want 11 s over 2 preemptions", w)
	}
	if w := byKey[model.CorunnerOther]; w.WaitedSeconds != (5+1)+(4+1) {
		t.Errorf("(other) = %+v, want the two smallest keys (11 s)", w)
	}
	// The smallest key grows past all others: it stays in (other).
	cs = append(cs, model.Corunner{Key: "/kg", Preemptions: 1, WaitedSeconds: 100})
	for _, w := range a.totals("domain/vm1", cs) {
		if w.Key == "/kg" {
			t.Errorf("a key beyond the cap was admitted later: %+v", w)
		}
		if prev, ok := byKey[w.Key]; ok && w.WaitedSeconds < prev.WaitedSeconds {
			t.Errorf("%s went down: %v -> %v", w.Key, prev.WaitedSeconds, w.WaitedSeconds)
		}
	}
	a.forget(nil, map[string]targets.Target{})
	if len(a.admitted) != 0 {
		t.Errorf("admitted keys of a gone target kept: %v", a.admitted)
	}
}
