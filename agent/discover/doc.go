// Package discover finds the VMs on a host by what their processes are,
// without asking a management daemon: every QEMU (qemu-system-*,
// qemu-kvm), Cloud Hypervisor, Firecracker and crosvm process, found in
// /proc by its executable, with its vCPU threads and their indices and a
// name, all from the hypervisor's own structure:
//
//   - vCPU threads: the names the hypervisor gives them ("CPU n/KVM" and
//     "CPU n/TCG" for QEMU with debug-threads=on, "vcpuN" for Cloud
//     Hypervisor, "fc_vcpu N" for Firecracker, "crosvm_vcpuN" for crosvm),
//     or, for QEMU with a QMP socket on its command line, QMP's
//     query-cpus-fast, which is authoritative where it answers. A guest
//     cannot name host threads; a process that merely calls itself
//     qemu-system-x86_64 but has no such threads is not a VM.
//   - name: QEMU's -name (guest=NAME), Firecracker's --id, the file name of
//     Cloud Hypervisor's --api-socket or crosvm's --socket; a QEMU in a
//     Kubernetes pod's cgroup (KubeVirt's virt-launcher, which names its
//     domain NAMESPACE_VMI) is named NAMESPACE/VMI.
//
// Source turns the scans into target events (Added, Removed as VMs come
// and go), targets of kind domain like libvirt's, so that metrics,
// mitigation and hint pages treat them alike. Merge puts a libvirt source
// in front: a VM libvirtd describes is its target, never a second one.
package discover
