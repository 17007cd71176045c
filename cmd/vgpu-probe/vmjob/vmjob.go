// Package vmjob is `vgpu-probe vm-job`, hidden: the guest side of the
// libvirt experiment backend. The test guest's init runs it with the job
// from the kernel command line; it talks to the host over a virtio-serial
// port (see experiments/paper/backend/libvirt/job).
package vmjob

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend/libvirt/job"
)

// NewCmd returns the vm-job command.
func NewCmd() *cobra.Command {
	var spec, port string
	cmd := &cobra.Command{
		Use:    "vm-job",
		Short:  "Run an experiment job inside a guest (used by run --backend libvirt)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := job.RunFrom(spec, port)
			if errors.Is(err, job.ErrBadJob) {
				return usage.Wrap(err)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&spec, "job", "", "the job, as on the kernel command line (default: read /proc/cmdline)")
	cmd.Flags().StringVar(&port, "port", "", "the virtio-serial port device (default: the one named "+job.PortName+")")
	return cmd
}
