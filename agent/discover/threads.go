package discover

import (
	"strconv"
	"strings"
)

// maxVCPU bounds a vCPU index read from a thread name: KVM allows a few
// thousand vCPUs; a larger number is not a vCPU thread.
const maxVCPU = 1 << 14

// vcpuIndex reads the vCPU index from the name a hypervisor gives its
// vCPU threads (the comm, at most 15 bytes):
//
//	QEMU             "CPU 3/KVM", "CPU 0/TCG" (accelerator after the slash; debug-threads=on)
//	Cloud Hypervisor "vcpu3"
//	Firecracker      "fc_vcpu 3"
//	crosvm           "crosvm_vcpu3"
//
// Only the hypervisor itself names these threads; a guest cannot.
func vcpuIndex(h Hypervisor, comm string) (int, bool) {
	var digits string
	switch h {
	case QEMU:
		rest, ok := strings.CutPrefix(comm, "CPU ")
		if !ok {
			return -1, false
		}
		n, accel, ok := strings.Cut(rest, "/")
		if !ok || accel == "" || !letters(accel) {
			return -1, false
		}
		digits = n
	case CloudHypervisor:
		digits, _ = strings.CutPrefix(comm, "vcpu")
		if digits == comm {
			return -1, false
		}
	case Firecracker:
		digits, _ = strings.CutPrefix(comm, "fc_vcpu ")
		if digits == comm {
			return -1, false
		}
	case Crosvm:
		digits, _ = strings.CutPrefix(comm, "crosvm_vcpu")
		if digits == comm {
			return -1, false
		}
	default:
		return -1, false
	}
	return index(digits)
}

// index parses a plain decimal vCPU index: no sign, no leading zeros
// (the hypervisors print them with %d / {}).
func index(s string) (int, bool) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return -1, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return -1, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n >= maxVCPU {
		return -1, false
	}
	return n, true
}

func letters(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}
