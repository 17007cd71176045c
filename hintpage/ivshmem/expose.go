package ivshmem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// Expose finds the device under root (sysfs' PCI devices, SysPCI): the
// one at bdf, or, with bdf "", the ivshmem device holding a hint page (or
// the only one); it enables the device and bind-mounts its BAR2 read-only
// onto out, an absolute path. Undo takes it all back; leaving it in place
// is allowed (a later Expose of the same BAR finds it exposed).
func Expose(root, bdf, out string) (*Exposure, error) {
	dir, err := deviceDir(root, bdf)
	if err != nil {
		return nil, err
	}
	if err := enable(dir); err != nil {
		return nil, err
	}
	res, err := checkBAR(dir)
	if err != nil {
		return nil, err
	}
	e, err := expose(res, out)
	if err != nil {
		return nil, err
	}
	e.device = filepath.Base(dir)
	return e, nil
}

// Device is the PCI address of the exposed device.
func (e *Exposure) Device() string { return e.device }

// PageState says whether the agent publishes into the page at path yet;
// readers fall back until it does, and pick the page up when it appears.
func PageState(path string) string {
	f, err := hintpage.Map(path)
	if err != nil {
		return "no hint page yet: readers fall back until the agent publishes"
	}
	defer f.Close()
	return fmt.Sprintf("hint page with %d slots", f.Slots())
}

// Exposure is BAR2 made readable at a path in /dev/shm through a
// read-only bind mount: readers map the device memory itself, so they see
// every publish as the host makes it and the guest spends no CPU copying
// (see docs/hints.md "In the guest").
type Exposure struct {
	res, out string
	device   string
	oldMode  os.FileMode
	created  bool // out was made here, so it is removed on undo
	mounted  bool // the mount is ours (not one an earlier run left)
}

// expose bind-mounts res read-only onto out and lets everyone read res
// (the sysfs file is 0600: a bind mount keeps the inode's mode).
func expose(res, out string) (*Exposure, error) {
	e := &Exposure{res: res, out: out}
	fi, err := os.Stat(res)
	if err != nil {
		return nil, err
	}
	e.oldMode = fi.Mode().Perm()
	same, err := e.prepareOut(fi)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(res, e.oldMode|0o044); err != nil {
		e.Undo()
		return nil, fmt.Errorf("making %s readable: %w", res, err)
	}
	if same {
		return e, nil // an earlier --once run exposed it already
	}
	if err := unix.Mount(res, out, "", unix.MS_BIND, ""); err != nil {
		e.Undo()
		return nil, fmt.Errorf("bind-mounting %s on %s: %w", res, out, err)
	}
	e.mounted = true
	if err := unix.Mount("", out, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		e.Undo()
		return nil, fmt.Errorf("making %s read-only: %w", out, err)
	}
	return e, nil
}

// prepareOut makes sure out is a plain file to mount on, creating it if
// needed; same reports that out already is res.
func (e *Exposure) prepareOut(res os.FileInfo) (same bool, err error) {
	fi, err := os.Lstat(e.out)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f, err := os.OpenFile(e.out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return false, fmt.Errorf("creating %s: %w", e.out, err)
		}
		e.created = true
		return false, f.Close()
	case err != nil:
		return false, err
	case os.SameFile(fi, res):
		return true, nil
	case !fi.Mode().IsRegular():
		// A symlink here could redirect the mount anywhere.
		return false, fmt.Errorf("%s exists and is not a regular file: remove it", e.out)
	}
	return false, nil
}

// Undo removes the mount and the file and restores res's mode.
func (e *Exposure) Undo() error {
	var errs []error
	if e.mounted {
		if err := unix.Unmount(e.out, unix.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", e.out, err))
		}
	}
	if e.created {
		if err := os.Remove(e.out); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Chmod(e.res, e.oldMode); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
