package discover

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// findPID scans the real /proc until the VM of pid is found with n vCPUs
// (QEMU creates its vCPU threads one by one while it starts), or for
// wait; then it returns what it found last.
func findPID(t *testing.T, s *Scanner, pid, n int, wait time.Duration) (VM, bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		vms, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		var found VM
		ok := false
		for _, vm := range vms {
			if vm.PID == pid {
				found, ok = vm, true
			}
		}
		if (ok && len(found.VCPUs) >= n) || time.Now().After(deadline) {
			return found, ok
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkVCPUs: indices 0..n-1, each a thread of pid.
func checkVCPUs(t *testing.T, vm VM, n int) {
	t.Helper()
	if len(vm.VCPUs) != n {
		t.Fatalf("%s: vCPUs %+v, want %d", vm.Name, vm.VCPUs, n)
	}
	for i, th := range vm.VCPUs {
		if th.VCPU != i {
			t.Errorf("%s: vCPU %d has index %d", vm.Name, i, th.VCPU)
		}
		if _, err := os.Stat(filepath.Join("/proc", itoa(vm.PID), "task", itoa(th.TID))); err != nil {
			t.Errorf("%s: vCPU %d thread %d is not a thread of %d", vm.Name, i, th.TID, vm.PID)
		}
	}
}

// Stand-ins named like each hypervisor, whose threads carry its vCPU
// thread names and whose command lines carry its identity flags.
func TestStandIns(t *testing.T) {
	for _, c := range []struct {
		exe, threads string
		args         []string
		hv           Hypervisor
		name         string
	}{
		{"firecracker", "fc_vcpu %d", []string{"--api-sock", "/run/fc-gpu.sock", "--id", "fc-gpu-1"}, Firecracker, "fc-gpu-1"},
		{"cloud-hypervisor", "vcpu%d", []string{"--api-socket", "path=/run/ch/ch-gpu-2.sock", "--cpus", "boot=3"}, CloudHypervisor, "ch-gpu-2"},
		{"crosvm", "crosvm_vcpu%d", []string{"run", "--cpus", "3", "-s", "/run/crosvm/cv-3.sock", "vmlinux"}, Crosvm, "cv-3"},
	} {
		t.Run(c.exe, func(t *testing.T) {
			cmd := discovertest.StandIn(t, c.exe, c.threads, 3, c.args...)
			vm, ok := findPID(t, NewScanner(Options{}), cmd.Process.Pid, 3, 5*time.Second)
			if !ok {
				t.Fatalf("%s (pid %d) not discovered", c.exe, cmd.Process.Pid)
			}
			if vm.Hypervisor != c.hv || vm.Name != c.name || vm.ByQMP {
				t.Errorf("got %s %q (qmp %v), want %s %q", vm.Hypervisor, vm.Name, vm.ByQMP, c.hv, c.name)
			}
			checkVCPUs(t, vm, 3)
			if tg := vm.Target(); tg.Kind != targets.KindDomain || len(tg.Helpers) != 0 {
				t.Errorf("target %+v", tg)
			}
		})
	}
}

// A process that calls itself qemu-system-x86_64 but runs no vCPU
// threads is not a VM; nor is one of another program whose threads are
// named like QEMU's vCPUs.
func TestImpostorsAreNotVMs(t *testing.T) {
	fake := discovertest.StandIn(t, "qemu-system-x86_64", "worker %d", 2, "-name", "guest=fake", "-smp", "2")
	other := discovertest.StandIn(t, "gpu-job", "CPU %d/KVM", 2, "-name", "guest=impostor")
	vms, err := NewScanner(Options{}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.PID == fake.Process.Pid || vm.PID == other.Process.Pid {
			t.Errorf("%s (pid %d) taken for a VM: %+v", vm.Name, vm.PID, vm)
		}
	}
}

// QEMU itself, without libvirt (TCG, paused): named by -name, its two
// vCPU threads from their names with debug-threads=on, else from the QMP
// socket on its command line (both ways of giving one).
func TestQEMU(t *testing.T) {
	sock := func() string { return filepath.Join(t.TempDir(), "qmp.sock") }
	q1 := sock()
	q2 := sock()
	for _, c := range []struct {
		name string
		args []string
		qmp  bool
	}{
		{"debug-threads", []string{"-name", "guest=disc-dt,debug-threads=on", "-smp", "2"}, false},
		{"qmp", []string{"-name", "disc-qmp", "-smp", "2", "-qmp", "unix:" + q1 + ",server=on,wait=off"}, true},
		{"chardev", []string{"-name", "guest=disc-mon", "-smp", "2", "-chardev", "socket,id=mon0,path=" + q2 + ",server=on,wait=off", "-mon", "chardev=mon0,mode=control"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := discovertest.QEMU(t, c.args...)
			vm, ok := findPID(t, NewScanner(Options{Log: zerolog.New(zerolog.NewTestWriter(t))}), cmd.Process.Pid, 2, 20*time.Second)
			if !ok {
				t.Fatalf("QEMU %v (pid %d) not discovered", c.args, cmd.Process.Pid)
			}
			want := map[string]string{"debug-threads": "disc-dt", "qmp": "disc-qmp", "chardev": "disc-mon"}[c.name]
			if vm.Name != want || vm.Hypervisor != QEMU || vm.ByQMP != c.qmp {
				t.Errorf("got %q %s qmp=%v, want %q qmp=%v", vm.Name, vm.Hypervisor, vm.ByQMP, want, c.qmp)
			}
			checkVCPUs(t, vm, 2)
			if tg := vm.Target(); len(tg.Helpers) != 1 || tg.Helpers[0] != vm.PID {
				t.Errorf("helpers %v, want QEMU's main thread %d", tg.Helpers, vm.PID)
			}
		})
	}
}

// A Source adds a VM that starts and removes it when its process ends.
func TestSourceFollowsVMs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch := NewSource(Options{}).Run(ctx)
	first := discovertest.StandIn(t, "firecracker", "fc_vcpu %d", 1, "--id", "src-follow")
	next := func(kind targets.EventKind) targets.Event {
		t.Helper()
		for ev := range ch {
			if ev.Target.Name == "src-follow" && ev.Kind == kind {
				return ev
			}
		}
		t.Fatalf("no %v event for src-follow", kind)
		return targets.Event{}
	}
	ev := next(targets.Added)
	if len(ev.Target.Threads) != 1 || ev.Target.Threads[0].VCPU != 0 {
		t.Errorf("added %+v", ev.Target)
	}
	first.Process.Kill()
	first.Wait()
	next(targets.Removed)
}
