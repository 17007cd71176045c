package discover

import (
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

func TestHypervisorOf(t *testing.T) {
	for in, want := range map[string]Hypervisor{
		"/usr/bin/qemu-system-x86_64":                                QEMU,
		"/usr/bin/qemu-system-aarch64 (deleted)":                     QEMU,
		"/usr/libexec/qemu-kvm":                                      QEMU,
		"qemu-system-x86":                                            QEMU, // comm, truncated
		"/usr/bin/cloud-hypervisor":                                  CloudHypervisor,
		"cloud-hyperviso":                                            CloudHypervisor,
		"/srv/jailer/firecracker/vm1/root/firecracker-v1.7.0-x86_64": Firecracker,
		"/usr/bin/crosvm":                                            Crosvm,
		"/usr/bin/qemu-img":                                          "",
		"/bin/bash":                                                  "",
		"/usr/bin/qemu-system-x86_64-wrapper.sh.bak/x":               "",
	} {
		got, ok := hypervisorOf(in)
		if got != want || ok != (want != "") {
			t.Errorf("%q: got %q %v, want %q", in, got, ok, want)
		}
	}
}

func TestQEMUIdentity(t *testing.T) {
	for _, c := range []struct {
		args      string // space-separated
		name, qmp string
	}{
		{"qemu-system-x86_64 -accel tcg -name guest=web1,debug-threads=on -smp 2", "web1", ""},
		{"qemu-system-x86_64 -name web1", "web1", ""},
		{"kvm -id 100 -name vm,,one,debug-threads=on -no-shutdown -chardev socket,id=qmp,path=/var/run/qemu-server/100.qmp,server=on,wait=off -mon chardev=qmp,mode=control", "vm,one", "/var/run/qemu-server/100.qmp"},
		{"qemu --name guest=a,process=qemu:a -qmp unix:/run/a.qmp,server,nowait", "a", "/run/a.qmp"},
		{"qemu -qmp tcp:localhost:4444,server -monitor unix:/run/hmp.sock,server", "", ""},
		// libvirt passes its monitor as a file descriptor: no path.
		{"qemu -name guest=default_vm1,debug-threads=on -chardev socket,id=charmonitor,fd=21,server=on,wait=off -mon chardev=charmonitor,id=monitor,mode=control", "default_vm1", ""},
		{"qemu -chardev socket,id=m,path=/run/hmp -mon chardev=m", "", ""}, // readline (HMP), not QMP
		{"qemu -name", "", ""},
	} {
		id := qemuIdentity(strings.Fields(c.args))
		if id.name != c.name || id.qmp != c.qmp {
			t.Errorf("%s: got name %q qmp %q, want %q %q", c.args, id.name, id.qmp, c.name, c.qmp)
		}
	}
}

func TestOtherIdentities(t *testing.T) {
	for _, c := range []struct {
		hv   Hypervisor
		args string
		name string
	}{
		{Firecracker, "firecracker --api-sock /tmp/fc.sock --id vm-7 --config-file c.json", "vm-7"},
		{Firecracker, "firecracker --id=vm-8", "vm-8"},
		{Firecracker, "firecracker --api-sock /tmp/fc.sock", ""},
		{CloudHypervisor, "cloud-hypervisor --api-socket path=/run/ch/gpu-a.sock --cpus boot=4", "gpu-a"},
		{CloudHypervisor, "cloud-hypervisor --api-socket /run/vc/vm/sandbox42/clh-api.sock", "sandbox42"},
		{CloudHypervisor, "cloud-hypervisor --api-socket fd=3", ""},
		{Crosvm, "crosvm run --cpus 4 -s /run/crosvm/term1.sock vmlinux", "term1"},
		{Crosvm, "crosvm run --socket=/run/vm2 vmlinux", "vm2"},
	} {
		if got := parseIdentity(c.hv, strings.Fields(c.args)).name; got != c.name {
			t.Errorf("%s: name %q, want %q", c.args, got, c.name)
		}
	}
}

func TestVCPUIndex(t *testing.T) {
	for _, c := range []struct {
		hv   Hypervisor
		comm string
		want int // -1: not a vCPU thread
	}{
		{QEMU, "CPU 0/KVM", 0}, {QEMU, "CPU 12/TCG", 12}, {QEMU, "CPU 3/HVF", 3},
		{QEMU, "CPU 1", -1}, {QEMU, "CPU 01/KVM", -1}, {QEMU, "CPU -1/KVM", -1}, {QEMU, "CPU 1/", -1},
		{QEMU, "qemu-system-x86", -1}, {QEMU, "vcpu1", -1}, {QEMU, "CPU 99999/KVM", -1},
		{CloudHypervisor, "vcpu0", 0}, {CloudHypervisor, "vcpu17", 17}, {CloudHypervisor, "vcpu", -1}, {CloudHypervisor, "vmm", -1},
		{Firecracker, "fc_vcpu 0", 0}, {Firecracker, "fc_vcpu 5", 5}, {Firecracker, "fc_vcpu5", -1}, {Firecracker, "fc_api", -1},
		{Crosvm, "crosvm_vcpu2", 2}, {Crosvm, "crosvm_vcpu 2", -1}, {Crosvm, "CPU 2/KVM", -1},
	} {
		got, ok := vcpuIndex(c.hv, c.comm)
		if ok != (c.want >= 0) || (ok && got != c.want) {
			t.Errorf("%s %q: got %d %v, want %d", c.hv, c.comm, got, ok, c.want)
		}
	}
}

func TestKubeVirt(t *testing.T) {
	for _, c := range []struct {
		cgroup string
		uid    string
	}{
		{"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_7980_a1b2_c3d4e5f60718.slice/cri-containerd-0123abcd.scope\n", "1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"},
		{"4:cpu,cpuacct:/kubepods/burstable/pod1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718/0123abcd\n0::/\n", "1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"},
		{"0::/kubepods/pod1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718/0123abcd\n", "1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"},
		{"0::/machine.slice/machine-qemu\\x2d1\\x2dvm.scope/libvirt/vcpu0\n", ""},
		{"0::/user.slice/podman-pod1f2e3d4c.scope\n", ""},
	} {
		uid, ok := podUID(cgroups.Parse([]byte(c.cgroup)))
		if uid != c.uid || ok != (c.uid != "") {
			t.Errorf("%q: pod %q %v, want %q", c.cgroup, uid, ok, c.uid)
		}
	}
	if ns, vmi, ok := kubevirtName("gpu-team_trainer-0"); !ok || ns != "gpu-team" || vmi != "trainer-0" {
		t.Errorf("kubevirtName: %q %q %v", ns, vmi, ok)
	}
	for _, bad := range []string{"novmi", "_x", "x_", "a_b_c"} {
		if _, _, ok := kubevirtName(bad); ok {
			t.Errorf("kubevirtName(%q) accepted", bad)
		}
	}
}

// The parsers read what other users' processes put on their command
// lines and thread names: no input may panic them, and what they return
// stays within what the input holds.
func FuzzQEMUIdentity(f *testing.F) {
	f.Add([]byte("qemu\x00-name\x00guest=a,,b,debug-threads=on\x00-chardev\x00socket,id=q,path=/x\x00-mon\x00chardev=q,mode=control"))
	f.Add([]byte("qemu\x00-qmp\x00unix:/a,,b,server=on"))
	f.Add([]byte("qemu\x00-name\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		args := splitCmdline(b)
		id := qemuIdentity(args)
		joined := strings.ReplaceAll(string(b), ",,", ",")
		if !strings.Contains(joined, id.name) || !strings.Contains(joined, id.qmp) {
			t.Fatalf("identity %+v not from %q", id, b)
		}
		for _, h := range []Hypervisor{Firecracker, CloudHypervisor, Crosvm} {
			parseIdentity(h, args)
		}
	})
}

func FuzzVCPUIndex(f *testing.F) {
	for _, s := range []string{"CPU 0/KVM", "vcpu3", "fc_vcpu 1", "crosvm_vcpu12", "CPU 1/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, comm string) {
		for _, h := range []Hypervisor{QEMU, CloudHypervisor, Firecracker, Crosvm} {
			i, ok := vcpuIndex(h, comm)
			if ok && (i < 0 || i >= maxVCPU || !strings.Contains(comm, itoa(i))) {
				t.Fatalf("%s %q: index %d", h, comm, i)
			}
		}
	})
}

func FuzzPodUID(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabcdef01_2345.slice/x.scope\n"))
	f.Add([]byte("1:cpu:/kubepods/pod0123456789/c\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		uid, ok := podUID(cgroups.Parse(b))
		if ok && !validUID(uid) {
			t.Fatalf("%q: uid %q", b, uid)
		}
		kubevirtName(string(b))
	})
}

func itoa(i int) string { return strconv.Itoa(i) }
