package run

import (
	"errors"
	"os"

	"github.com/vgpu-probe/vgpu-probe/agent/hints"
)

// checkHints rejects --hints where it cannot work, before anything starts:
// the page reaches a guest only through the runner domain's ivshmem device, and publishing
// it loads the agent's eBPF programs.
func (o *Options) checkHints() error {
	if !o.Hints {
		return nil
	}
	if o.Backend != "libvirt" {
		return errors.New("--hints is for --backend libvirt (the page reaches the runner's guest through its ivshmem device)")
	}
	if os.Geteuid() != 0 {
		return errors.New("--hints publishes the hint page with the agent's eBPF programs, which needs root")
	}
	return hints.CheckDir(hints.DefaultDir)
}
