// Package vmjob is `vgpu-probe vm-job`, hidden: the guest side of the
// libvirt experiment backend. The test guest's init runs it with the job
// from the kernel command line; it talks to the host over a virtio-serial
// port (see experiments/backend/libvirt/job).
package vmjob

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/backend/libvirt/job"
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
			if spec == "" {
				spec = fromCmdline()
			}
			if spec == "" {
				return usage.Errorf("no job: give --job or boot with %s= on the kernel command line", job.CmdlineKey)
			}
			j, err := job.ParseCmdlineValue(spec)
			if err != nil {
				return usage.Wrap(err)
			}
			if port == "" {
				if port, err = job.FindPort(job.PortName); err != nil {
					return err
				}
			}
			f, err := os.OpenFile(port, os.O_RDWR, 0)
			if err != nil {
				return fmt.Errorf("job port: %w", err)
			}
			defer f.Close()
			return job.RunGuest(j, f)
		},
	}
	cmd.Flags().StringVar(&spec, "job", "", "the job, as on the kernel command line (default: read /proc/cmdline)")
	cmd.Flags().StringVar(&port, "port", "", "the virtio-serial port device (default: the one named "+job.PortName+")")
	return cmd
}

func fromCmdline() string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, job.CmdlineKey+"="); ok {
			return v
		}
	}
	return ""
}
