package main

import (
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/libhybridsync/cudadev"
)

// The benchmark's devices beyond the simulated GPU are wired here, not by
// the device packages themselves: libhybridsync/ stays below experiments/ (see
// docs/architecture.md). In init, because benchmark cells run in a child
// process (reexec) that never reaches main's command line.
func init() { workload.RegisterDevice("cuda", openCUDA) }

// openCUDA is cudadev.Open as a workload.Opener.
func openCUDA(mode hybridsync.Mode) (workload.Device, workload.Waiter, func(), error) {
	dev, wait, closeDev, err := cudadev.Open(mode)
	if err != nil {
		return nil, nil, nil, err // not a typed nil *Device in the interface
	}
	return dev, wait, closeDev, nil
}
