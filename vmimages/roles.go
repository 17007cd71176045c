package vmimages

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The paper's two roles: the GPU runner VM and the co-runner VMs whose
// vCPUs share its physical CPUs. They differ in what they carry: only the
// runner gets the hint page and a passed-through GPU.
const (
	RoleGPURunner = "gpurunner"
	RoleCorunner  = "corunner"
)

// RoleMemoryMiB fits the kernel, the initramfs (a static vgpu-probe of
// about 25 MiB unpacked) and the workload.
const RoleMemoryMiB = 256

// Role is what both role templates take.
type Role struct {
	Name  string
	Image Image
	Type  string // TypeQEMU or TypeKVM; see ProbeType
	// CPUs pins vCPU i to CPUs[i]; the emulator threads share all of them,
	// so a VM never reaches outside the CPU set of its experiment.
	CPUs []int
	// PeriodUS and QuotaUS are per-vCPU CFS bandwidth (<cputune>); 0: none.
	PeriodUS, QuotaUS int64
	// Job is the guest's first job, "vgpu.job=..." (experiments/paper/backend/
	// libvirt/job); Channel carries the rest and the results.
	Job       string
	Channel   *Channel
	SerialLog string
}

// GPURunner is the domain of the VM that runs the GPU workload; shmem
// (an ivshmem device, may be nil), hintArgs (the QEMU arguments of the
// host's hint page, hintpage.QEMUArgs; may be nil) and hostdevs (PCI
// addresses of passed-through GPUs) are the runner's alone.
func GPURunner(r Role, shmem *Shmem, hintArgs, hostdevs []string) Domain {
	d := r.domain()
	d.Shmem, d.QEMUArgs, d.HostDevs = shmem, hintArgs, hostdevs
	return d
}

// Corunner is the domain of a VM that only competes for the CPUs.
func Corunner(r Role) Domain { return r.domain() }

func (r Role) domain() Domain {
	d := Domain{
		Name: r.Name, VCPUs: len(r.CPUs), MemoryMiB: RoleMemoryMiB, Image: r.Image, Type: r.Type,
		Cmdline: r.Job, PeriodUS: r.PeriodUS, QuotaUS: r.QuotaUS, Channel: r.Channel, SerialLog: r.SerialLog,
		EmulatorPin: r.CPUs,
	}
	for _, c := range r.CPUs {
		d.Pin = append(d.Pin, []int{c})
	}
	return d
}

// ProbeType returns the domain type to use on this host: TypeKVM where
// /dev/kvm works and can boot a stock kernel, else TypeQEMU (TCG), with
// the reason. Paravirtual KVM (kvm_pvm, found on some cloud machines) has
// a /dev/kvm that answers but emulates a stock guest kernel instruction by
// instruction and never finishes booting it.
func ProbeType() (string, string) {
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return TypeQEMU, "KVM here is paravirtual (kvm_pvm), which cannot boot a stock guest kernel"
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return TypeQEMU, "no usable /dev/kvm: " + err.Error()
	}
	defer f.Close()
	const kvmGetAPIVersion = 0xAE00
	v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion)
	if err != nil {
		return TypeQEMU, "/dev/kvm does not answer KVM_GET_API_VERSION: " + err.Error()
	}
	if v != 12 {
		return TypeQEMU, fmt.Sprintf("/dev/kvm has API version %d, not 12", v)
	}
	return TypeKVM, "/dev/kvm works"
}
