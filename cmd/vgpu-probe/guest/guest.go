// Package guest is `vgpu-probe guest`: inside a VM, it exposes the hint
// page the host agent publishes into the ivshmem device's BAR2 as a
// read-only file for local processes (HYBRIDSYNC_HINTS).
package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hintpage/ivshmem"
)

// DefaultOut is where local processes find the page.
const DefaultOut = hintpage.GuestPath

// Options are guest's flags.
type Options struct {
	Device string
	Out    string
	Once   bool
	// Euid is os.Geteuid and SysPCI ivshmem.SysPCI; tests replace them.
	Euid   func() int
	SysPCI string
	Log    io.Writer
}

// NewCmd returns the guest command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{Euid: os.Geteuid, SysPCI: ivshmem.SysPCI}
	cmd := &cobra.Command{
		Use:   "guest",
		Short: "Inside a VM: expose the host's hint page (ivshmem BAR2) read-only to local processes",
		Long: `guest finds the ivshmem-plain PCI device (1af4:1110) that carries the hint
page 'vgpu-probe agent --hints /run/vgpu-probe/hints' publishes for this VM, enables it,
and bind-mounts its BAR2 read-only at --out (mode 0644), so that
HYBRIDSYNC_HINTS=` + DefaultOut + ` works for the library. Without --once it
stays until interrupted, then removes the file; with --once it leaves it in
place and exits. Needs root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = cmd.ErrOrStderr()
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Device, "device", "", "PCI address of the ivshmem device, e.g. 0000:00:05.0 (default: find it)")
	f.StringVar(&o.Out, "out", DefaultOut, "where local processes find the page")
	f.BoolVar(&o.Once, "once", false, "expose the page and exit, leaving it in place")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{"out": complete.AnyFile})
	return cmd
}

// Run exposes the page, then, unless o.Once, waits for ctx and undoes it.
func Run(ctx context.Context, o *Options) error {
	if o.Euid() != 0 {
		return usage.Errorf("vgpu-probe guest must run as root: it enables a PCI device and mounts its BAR")
	}
	if o.Out == "" || !filepath.IsAbs(o.Out) {
		return usage.Errorf("--out %q: want an absolute path", o.Out)
	}
	e, err := ivshmem.Expose(o.SysPCI, o.Device, o.Out)
	if err != nil {
		return deviceError(err)
	}
	fmt.Fprintf(o.Log, "vgpu-probe guest: %s BAR2 at %s (%s)\n", e.Device(), o.Out, ivshmem.PageState(o.Out))
	if o.Once {
		return nil
	}
	<-ctx.Done()
	return e.Undo()
}

// deviceError makes an error about the device --device named bad input.
func deviceError(err error) error {
	for _, bad := range []error{ivshmem.ErrBadAddress, ivshmem.ErrNoSuchDevice, ivshmem.ErrNotIvshmem} {
		if errors.Is(err, bad) {
			return usage.Errorf("--device %v", err)
		}
	}
	return err
}
