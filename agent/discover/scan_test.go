package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// fakeProc writes one process of root into a proc tree: its executable
// (a file of that name in a directory of root's, so that the trust checks
// pass), its root, command line, cgroup and threads (tid -> comm).
func fakeProc(t *testing.T, root string, pid int, exe string, args []string, cgroup string, threads map[int]string) {
	t.Helper()
	fakeProcAs(t, root, pid, 0, exe, args, cgroup, threads)
}

// fakeProcAs is fakeProc for a process of uid.
func fakeProcAs(t *testing.T, root string, pid, uid int, exe string, args []string, cgroup string, threads map[int]string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the fixture's executables must be root's to be trusted: needs root")
	}
	dir := filepath.Join(root, strconv.Itoa(pid))
	write := func(name, content string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cmdline", strings.Join(args, "\x00")+"\x00")
	write("cgroup", cgroup)
	write("stat", strconv.Itoa(pid)+" (x y) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0\n")
	write("comm", filepath.Base(exe)+"\n")
	u := strconv.Itoa(uid)
	write("status", "Name:\tx\nUid:\t"+u+"\t"+u+"\t"+u+"\t"+u+"\nGid:\t"+u+"\t"+u+"\t"+u+"\t"+u+"\nGroups:\t\n")
	bin := filepath.Join(t.TempDir(), filepath.Base(exe))
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "exe")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
		t.Fatal(err)
	}
	for tid, comm := range threads {
		write(filepath.Join("task", strconv.Itoa(tid), "comm"), comm+"\n")
	}
}

// A KubeVirt VM (virt-launcher's QEMU in a pod's cgroup) is named
// NAMESPACE/VMI; a process that only calls itself QEMU, and one that is
// not a hypervisor but names its threads like QEMU's vCPUs, are not VMs.
func TestScanFixture(t *testing.T) {
	root := t.TempDir()
	fakeProcAs(t, root, 100, kubevirtQEMUUID, "/usr/libexec/qemu-kvm",
		[]string{"/usr/libexec/qemu-kvm", "-name", "guest=gpu-team_trainer-0,debug-threads=on", "-smp", "2"},
		"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_7980_a1b2_c3d4e5f60718.slice/cri-containerd-0123abcd.scope\n",
		map[int]string{100: "qemu-kvm", 101: "CPU 0/KVM", 102: "CPU 1/KVM", 103: "IO mon_iothread"})
	fakeProc(t, root, 200, "/usr/bin/qemu-system-x86_64", []string{"qemu-system-x86_64", "-name", "fake"}, "0::/\n",
		map[int]string{200: "qemu-system-x86", 201: "worker"})
	fakeProc(t, root, 300, "/usr/bin/python3", []string{"python3", "-name", "guest=impostor"}, "0::/\n",
		map[int]string{300: "python3", 301: "CPU 0/KVM"})
	fakeProc(t, root, 400, "/usr/bin/qemu-system-x86_64", []string{"qemu-system-x86_64", "-smp", "1"}, "0::/user.slice\n",
		map[int]string{400: "qemu-system-x86", 401: "CPU 0/TCG"})
	// Not trusted: a user's QEMU; KubeVirt's qemu uid outside a pod, and
	// in a cgroup a user named like a pod's under its own delegated
	// subtree.
	fakeProcAs(t, root, 500, 1000, "/usr/bin/qemu-system-x86_64", []string{"qemu-system-x86_64", "-name", "guest=gpu-team_trainer-0,debug-threads=on"}, "0::/user.slice\n",
		map[int]string{500: "qemu-system-x86", 501: "CPU 0/KVM"})
	fakeProcAs(t, root, 600, kubevirtQEMUUID, "/usr/bin/qemu-system-x86_64", []string{"qemu-system-x86_64", "-name", "x,debug-threads=on"}, "0::/system.slice\n",
		map[int]string{600: "qemu-system-x86", 601: "CPU 0/KVM"})
	fakeProcAs(t, root, 700, kubevirtQEMUUID, "/usr/libexec/qemu-kvm", []string{"qemu-kvm", "-name", "guest=ns_vmi,debug-threads=on"},
		"0::/user.slice/user-1000.slice/user@1000.service/kubepods/pod1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718/x\n",
		map[int]string{700: "qemu-kvm", 701: "CPU 0/KVM"})

	untrusted := -1
	vms, err := NewScanner(Options{ProcRoot: root, Untrusted: func(n int) { untrusted = n }}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	if untrusted != 3 {
		t.Errorf("%d untrusted processes counted, want 3", untrusted)
	}
	if len(vms) != 2 {
		t.Fatalf("found %+v, want the KubeVirt VM and the nameless QEMU", vms)
	}
	kv := vms[0]
	if kv.PID != 100 || kv.Name != "gpu-team/trainer-0" || kv.Namespace != "gpu-team" || kv.VMI != "trainer-0" || kv.Hypervisor != QEMU {
		t.Errorf("KubeVirt VM: %+v", kv)
	}
	want := targets.Target{Kind: targets.KindDomain, Name: "gpu-team/trainer-0", Helpers: []int{100},
		Threads: []targets.Thread{{TID: 101, VCPU: 0}, {TID: 102, VCPU: 1}}}
	if !kv.Target().Equal(want) {
		t.Errorf("target %+v, want %+v", kv.Target(), want)
	}
	if vms[1].PID != 400 || vms[1].Name != "qemu-400" || len(vms[1].VCPUs) != 1 {
		t.Errorf("nameless QEMU: %+v", vms[1])
	}
}

// A trusted VM past the per-VM bounds is cut to them, each cut counted
// once for the life of its process.
func TestScanBounds(t *testing.T) {
	root := t.TempDir()
	threads := map[int]string{1000: "qemu-system-x86"}
	for i := range MaxVCPUs + 10 {
		threads[1001+i] = fmt.Sprintf("CPU %d/KVM", i)
	}
	long := strings.Repeat("n", MaxNameLen+50)
	fakeProc(t, root, 1000, "/usr/bin/qemu-system-x86_64", []string{"qemu-system-x86_64", "-name", "guest=" + long + ",debug-threads=on"}, "0::/\n", threads)
	cuts := map[string]int{}
	s := NewScanner(Options{ProcRoot: root, Limited: func(l string) { cuts[l]++ }})
	for range 2 {
		vms, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		if len(vms) != 1 || len(vms[0].VCPUs) != MaxVCPUs || vms[0].VCPUs[MaxVCPUs-1].VCPU != MaxVCPUs-1 || vms[0].Name != long[:MaxNameLen] {
			t.Fatalf("got %d VMs, want one of %d vCPUs (0..%d) named with %d bytes", len(vms), MaxVCPUs, MaxVCPUs-1, MaxNameLen)
		}
	}
	if cuts[LimitVCPUs] != 1 || cuts[LimitName] != 1 {
		t.Errorf("cuts counted %v, want vcpus and name once each", cuts)
	}
}

// Past MaxVMs, the VMs already sent keep their place and new ones wait,
// each counted at every scan it waits.
func TestSourceBoundsVMs(t *testing.T) {
	cut := 0
	s := NewSource(Options{ProcRoot: t.TempDir(), Limited: func(string) { cut++ }})
	var vms []VM
	sent := map[int]targets.Target{}
	for pid := 1; pid <= MaxVMs+50; pid++ {
		vms = append(vms, VM{PID: pid})
	}
	for pid := MaxVMs + 41; pid <= MaxVMs+50; pid++ {
		sent[pid] = targets.Target{}
	}
	got := s.bounded(vms, sent)
	if len(got) != MaxVMs || cut != 50 {
		t.Fatalf("%d VMs kept, %d counted; want %d and 50", len(got), cut, MaxVMs)
	}
	for pid := range sent {
		if !slices.ContainsFunc(got, func(v VM) bool { return v.PID == pid }) {
			t.Errorf("VM %d, already sent, left out", pid)
		}
	}
}
