package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	// Under -race the children are race-built too, and the race runtime
	// sleeps a second at exit by default: 40 s over a shape test.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// status returns a field of /proc/pid/status.
func status(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	return !strings.HasPrefix(s[strings.LastIndexByte(s, ')')+2:], "Z")
}

func lastCPU(t *testing.T) int {
	cpus, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	return cpus[len(cpus)-1]
}

var loop = workload.Config{Steps: 40, Work: 1000, Profile: simdev.Fixed("k", 200*time.Microsecond, 0)}

// TestSharedNoIsolation builds shared1 for real: the co-runner burns CPU
// pinned to the runner's CPU, the runner measures, and Destroy leaves
// nothing running.
func TestSharedNoIsolation(t *testing.T) {
	cpu := lastCPU(t)
	topo := backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{cpu}}, Corunners: []backend.VM{{Name: "co1", CPUs: []int{cpu}}, {Name: "co2", CPUs: []int{cpu}}}}
	env, err := Backend{}.Create(context.Background(), topo, backend.Load{Kind: "while1"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Destroy()
	pids := env.Corunners()
	if len(pids) != 2 {
		t.Fatalf("%d co-runners, want 2", len(pids))
	}
	var runnerPid int
	r, err := env.Run(context.Background(), backend.Workload{Config: loop, Device: "sim", Mode: hybridsync.ModeBlock}, func(pid int) {
		runnerPid = pid
		// The whole VM process is confined to its CPUs from the start.
		if got := status(t, pid, "Cpus_allowed_list"); got != strconv.Itoa(cpu) {
			t.Errorf("runner allowed on %q, want %d", got, cpu)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Steps != 40 || r.WallS <= 0 || r.CPUS <= 0 || runnerPid == 0 {
		t.Errorf("result %+v, pid %d", r, runnerPid)
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Errorf("co-runner %d died during the run", pid)
		}
	}
	if err := env.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append(pids, runnerPid) {
		if alive(pid) {
			t.Errorf("process %d still running after Destroy", pid)
		}
	}
}

// TestCommandWorkload runs a command as the workload: it sees the mode in
// HYBRIDSYNC_MODE and runs confined to the runner's CPUs, and its exit
// status is the measurement's.
func TestCommandWorkload(t *testing.T) {
	cpu := lastCPU(t)
	env, err := Backend{}.Create(context.Background(), backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{cpu}}}, backend.Load{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Destroy()
	check := fmt.Sprintf(`test "$HYBRIDSYNC_MODE" = block && grep -q "^Cpus_allowed_list:[[:space:]]*%d$" /proc/self/status`, cpu)
	r, err := env.Run(context.Background(), backend.Workload{Cmd: check, Mode: hybridsync.ModeBlock}, nil)
	if err != nil {
		t.Fatalf("mode and confinement check failed: %v", err)
	}
	if r.WallS <= 0 {
		t.Errorf("wall %v", r.WallS)
	}
	if _, err := env.Run(context.Background(), backend.Workload{Cmd: check, Mode: hybridsync.ModeSpin}, nil); err == nil {
		t.Error("a failing command (wrong mode) reported success")
	}
}

// TestCommandCorunnerRestartsAndStops: a co-runner command that exits is
// started again, and Destroy kills it and its children.
func TestCommandCorunnerRestartsAndStops(t *testing.T) {
	cpu := lastCPU(t)
	dir := t.TempDir()
	count := filepath.Join(dir, "starts")
	cmd := fmt.Sprintf("echo x >> %s; sleep 0.05", count)
	env, err := Backend{}.Create(context.Background(), backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{cpu}},
		Corunners: []backend.VM{{Name: "co1", CPUs: []int{cpu}}}}, backend.Load{Cmd: cmd})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	env.Destroy()
	b, _ := os.ReadFile(count)
	n := strings.Count(string(b), "x")
	if n < 2 {
		t.Errorf("co-runner command started %d times in 400 ms, want it restarted", n)
	}
	time.Sleep(100 * time.Millisecond)
	b2, _ := os.ReadFile(count)
	if strings.Count(string(b2), "x") != n {
		t.Error("co-runner command still running after Destroy")
	}
}

// TestSharedIsolation builds shared2 with real cgroups: each VM gets its
// own group with its fair quota, the runner runs inside its group, and
// Destroy removes the groups.
func TestSharedIsolation(t *testing.T) {
	if err := CanIsolate(); err != nil {
		if os.Geteuid() == 0 {
			t.Fatalf("root but no isolation: %v", err)
		}
		t.Skipf("needs root for cgroups (CI runs as root): %v", err)
	}
	cpu := lastCPU(t)
	topo := backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{cpu}, QuotaCPUs: 0.5},
		Corunners: []backend.VM{{Name: "co1", CPUs: []int{cpu}, QuotaCPUs: 0.5}}, Period: 20 * time.Millisecond}
	env, err := Backend{}.Create(context.Background(), topo, backend.Load{Kind: "while1"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Destroy()
	v, _ := cpucap.Detect()
	dir := func(vm string) string {
		if v == cpucap.V1 {
			return filepath.Join(cpucap.Root, "cpu", CgroupPrefix()+vm)
		}
		return filepath.Join(cpucap.Root, CgroupPrefix()+vm)
	}
	for _, vm := range []string{"runner", "co1"} {
		var limit string
		if v == cpucap.V1 {
			q, _ := os.ReadFile(filepath.Join(dir(vm), "cpu.cfs_quota_us"))
			p, _ := os.ReadFile(filepath.Join(dir(vm), "cpu.cfs_period_us"))
			limit = strings.TrimSpace(string(q)) + " " + strings.TrimSpace(string(p))
		} else {
			b, _ := os.ReadFile(filepath.Join(dir(vm), "cpu.max"))
			limit = strings.TrimSpace(string(b))
		}
		if limit != "10000 20000" {
			t.Errorf("%s: limit %q, want 10000 20000", vm, limit)
		}
	}
	procs, _ := os.ReadFile(filepath.Join(dir("co1"), "cgroup.procs"))
	if !strings.Contains(string(procs), strconv.Itoa(env.Corunners()[0])) {
		t.Errorf("co-runner not in its cgroup: %q", procs)
	}
	_, err = env.Run(context.Background(), backend.Workload{Config: loop, Device: "sim", Mode: hybridsync.ModeSpin}, func(pid int) {
		b, _ := os.ReadFile(filepath.Join(dir("runner"), "cgroup.procs"))
		if !strings.Contains(string(b), strconv.Itoa(pid)) {
			t.Errorf("runner %d not in its cgroup before it starts: %q", pid, b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, vm := range []string{"runner", "co1"} {
		if _, err := os.Stat(dir(vm)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after Destroy", dir(vm))
		}
	}
}

func TestCreateRejects(t *testing.T) {
	cpu := lastCPU(t)
	for name, tc := range map[string]struct {
		topo backend.Topology
		load backend.Load
	}{
		"no vCPUs":         {backend.Topology{Runner: backend.VM{Name: "runner"}}, backend.Load{}},
		"cpu not online":   {backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{4095}}}, backend.Load{}},
		"duplicate names":  {backend.Topology{Runner: backend.VM{Name: "a", CPUs: []int{cpu}}, Corunners: []backend.VM{{Name: "a", CPUs: []int{cpu}}}}, backend.Load{Kind: "while1"}},
		"unknown corunner": {backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{cpu}}, Corunners: []backend.VM{{Name: "c", CPUs: []int{cpu}}}}, backend.Load{Kind: "fork-bomb"}},
		"bad period":       {backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{cpu}, QuotaCPUs: 1}, Period: time.Hour}, backend.Load{}},
	} {
		if env, err := (Backend{}).Create(context.Background(), tc.topo, tc.load); err == nil {
			env.Destroy()
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSweepStale: a cgroup left by a run that no longer exists is removed;
// one of a live run is not.
func TestSweepStale(t *testing.T) {
	if err := CanIsolate(); err != nil {
		t.Skipf("needs root for cgroups: %v", err)
	}
	dead := 1 << 22 // above the default pid_max: never a live process
	for ; dead > 1; dead-- {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", dead)); err != nil {
			break
		}
	}
	stale, err := cpucap.Create(fmt.Sprintf("vgpu-probe-run-%d-runner", dead), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Remove()
	live, err := cpucap.Create(fmt.Sprintf("vgpu-probe-run-%d-runner", os.Getppid()), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	removed := sweepStale()
	if len(removed) != 1 || removed[0] != stale.Path {
		t.Errorf("swept %v, want only %s", removed, stale.Path)
	}
	if _, err := os.Stat(live.Path); err != nil {
		t.Errorf("the live run's cgroup was removed: %v", err)
	}
}
