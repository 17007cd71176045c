package agent

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// newHintsXML is the hints-xml subcommand.
func newHintsXML() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "hints-xml DOMAIN",
		Short: "Print the libvirt <qemu:commandline> element that maps DOMAIN's hint page into the guest",
		Long: `hints-xml prints the <qemu:commandline> element to add to a domain (a child
of <domain>, whose start tag must then carry
xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0') so that the hint page
the agent publishes for it (with --hints DIR, --dir here) appears in the guest
as an ivshmem-plain PCI device; run 'vgpu-probe guest' there. It is the
device 'agent hints-args' prints, for libvirt.

The page must exist, owned by QEMU's user, before the domain starts: a libvirt
hook (/etc/libvirt/hooks/qemu) makes it at "prepare", as docs/hints.md shows:
  vgpu-probe agent hints-args --owner libvirt-qemu DOMAIN >/dev/null
libvirt's own <shmem> is not used: it maps /dev/shm/NAME only, where any user
can make the file first (docs/hints.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !filepath.IsAbs(dir) {
				return usage.Errorf("--dir %q: want an absolute path (QEMU opens it)", dir)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), hintpage.LibvirtXML(dir, args[0]))
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", hints.DefaultDir, "the agent's --hints directory")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{"dir": complete.Dirs})
	return cmd
}

// newHintsArgs is the hints-args subcommand.
func newHintsArgs() *cobra.Command {
	var dir, owner string
	var proxmox, noPage bool
	cmd := &cobra.Command{
		Use:   "hints-args VM",
		Short: "Make VM's hint page and print the QEMU arguments that map it into the guest (QEMU without libvirt, Proxmox)",
		Long: `hints-args makes the hint page of VM in the agent's directory (--dir, the
agent's --hints) and prints the -object memory-backend-file and -device
ivshmem-plain arguments to add to a QEMU started without libvirt, so that the
page the agent publishes for VM (with --discover --hints DIR) appears in the
guest as an ivshmem-plain PCI device; run 'vgpu-probe guest' there. VM is the
name the agent gives it: QEMU's -name. With --proxmox it prints the args: line
for /etc/pve/qemu-server/VMID.conf instead.

Run it as root before every start of the VM (a Proxmox hookscript's
pre-start phase, a libvirt hook's prepare, the script that starts QEMU): the
page must exist when QEMU starts. It is made mode 0600 and owned by --owner,
the user QEMU runs as, from the moment it exists, in a directory only root
can write, so that no other user can make, swap or open it; a page already
there (made by an earlier hints-args or the agent) is kept. QEMU opens it as
it is; a page QEMU had to create itself the agent refuses. The directory is
made if it is the default; another must be owned by root and writable by no
one else. --no-page prints the arguments only (for a configuration file,
with the page made at each start).

An argument that a shell would split or expand (a --dir with a space or a
quote) is printed in single quotes, for a shell to read back: in a script,
eval "set -- $(vgpu-probe agent hints-args --dir DIR VM)" and pass "$@".`,
		Example: `  vgpu-probe agent hints-args guest1
  vgpu-probe agent hints-args --owner libvirt-qemu:kvm guest2
  vgpu-probe agent hints-args --proxmox --no-page web01 >> /etc/pve/qemu-server/100.conf`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !filepath.IsAbs(dir) {
				return usage.Errorf("--dir %q: want an absolute path (QEMU opens it)", dir)
			}
			if !noPage {
				if err := makePage(dir, owner, args[0]); err != nil {
					return err
				}
			}
			line := hintpage.QEMUArgsLine(dir, args[0])
			if proxmox {
				line = "args: " + line
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), line)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", hints.DefaultDir, "the agent's --hints directory")
	cmd.Flags().StringVar(&owner, "owner", "root", "USER[:GROUP] QEMU runs as, who owns the page")
	cmd.Flags().BoolVar(&proxmox, "proxmox", false, "print Proxmox VE's args: line")
	cmd.Flags().BoolVar(&noPage, "no-page", false, "print the arguments only; make no page")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{"dir": complete.Dirs, "owner": complete.Users})
	return cmd
}

// makePage makes VM's page in dir, owned by owner (USER[:GROUP]).
func makePage(dir, owner, vm string) error {
	uid, gid, err := lookupOwner(owner)
	if err != nil {
		return usage.Errorf("--owner %q: %v", owner, err)
	}
	if os.Geteuid() != 0 {
		return errors.New("hints-args makes the page in the agent's directory, which needs root (--no-page prints the arguments only)")
	}
	_, err = hints.PreparePage(dir, vm, uid, gid)
	return err
}

// lookupOwner resolves USER[:GROUP], names or numbers (a number need not
// be in the user database); GROUP defaults to USER's primary group, or to
// the number of a USER that is only a number.
func lookupOwner(s string) (uid, gid int, err error) {
	name, group, hasGroup := strings.Cut(s, ":")
	if uid, err = strconv.Atoi(name); err == nil && uid >= 0 {
		gid = uid
		if u, err := user.LookupId(name); err == nil {
			gid, _ = strconv.Atoi(u.Gid)
		}
	} else if u, err := user.Lookup(name); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	} else {
		return 0, 0, errors.New("no such user")
	}
	if !hasGroup {
		return uid, gid, nil
	}
	if gid, err = strconv.Atoi(group); err == nil && gid >= 0 {
		return uid, gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, 0, fmt.Errorf("no such group %q", group)
	}
	gid, _ = strconv.Atoi(g.Gid)
	return uid, gid, nil
}
