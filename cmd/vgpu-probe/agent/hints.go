package agent

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// newHintsXML is the hints-xml subcommand.
func newHintsXML() *cobra.Command {
	return &cobra.Command{
		Use:   "hints-xml DOMAIN",
		Short: "Print the libvirt <shmem> element that maps DOMAIN's hint page into the guest",
		Long: `hints-xml prints the <shmem> device to add to a domain's <devices> so that
the hint page the agent publishes for it (with --hints /dev/shm) appears in
the guest as an ivshmem-plain PCI device; run 'vgpu-probe guest' there.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), hintpage.ShmemXML(args[0]))
			return err
		},
	}
}

// newHintsArgs is the hints-args subcommand.
func newHintsArgs() *cobra.Command {
	var dir string
	var proxmox bool
	cmd := &cobra.Command{
		Use:   "hints-args VM",
		Short: "Print the QEMU arguments that map VM's hint page into the guest (QEMU without libvirt, Proxmox)",
		Long: `hints-args prints the -object memory-backend-file and -device ivshmem-plain
arguments to add to a QEMU started without libvirt, so that the hint page the
agent publishes for VM (with --discover --hints DIR) appears in the guest as
an ivshmem-plain PCI device; run 'vgpu-probe guest' there. VM is the name the
agent gives it: QEMU's -name. With --proxmox it prints the args: line for
/etc/pve/qemu-server/VMID.conf instead.

An argument that a shell would split or expand (a --dir with a space or a
quote) is printed in single quotes, for a shell to read back: in a script,
eval "set -- $(vgpu-probe agent hints-args --dir DIR VM)" and pass "$@".`,
		Example: `  vgpu-probe agent hints-args guest1
  vgpu-probe agent hints-args --proxmox web01 >> /etc/pve/qemu-server/100.conf`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !filepath.IsAbs(dir) {
				return usage.Errorf("--dir %q: want an absolute path (QEMU opens it)", dir)
			}
			line := hintpage.QEMUArgsLine(dir, args[0])
			if proxmox {
				line = "args: " + line
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), line)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "/dev/shm", "the agent's --hints directory")
	cmd.Flags().BoolVar(&proxmox, "proxmox", false, "print Proxmox VE's args: line")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{"dir": complete.Dirs})
	return cmd
}
