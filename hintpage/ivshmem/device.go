package ivshmem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// SysPCI is where the kernel lists PCI devices.
const SysPCI = "/sys/bus/pci/devices"

// The ivshmem-plain device of the hint page (hintpage.QEMUArgs, as QEMU
// arguments or libvirt's <qemu:commandline>; a libvirt <shmem> makes the
// same device).
const (
	vendorIvshmem = "0x1af4"
	deviceIvshmem = "0x1110"
)

var (
	// ErrNoDevice: no ivshmem-plain device in the guest.
	ErrNoDevice = errors.New("no ivshmem device (PCI 1af4:1110): add the <qemu:commandline> element of 'vgpu-probe agent hints-xml DOMAIN' to the domain (or 'agent hints-args VM' to QEMU)")
	// ErrBadAddress: a named device that is not a PCI address.
	ErrBadAddress = errors.New("want a PCI address like 0000:00:05.0")
	// ErrNoSuchDevice: a named device the guest does not have.
	ErrNoSuchDevice = errors.New("no such PCI device")
	// ErrNotIvshmem: a named device that is another kind of device.
	ErrNotIvshmem = errors.New("not an ivshmem device (PCI 1af4:1110)")
)

var bdfRE = regexp.MustCompile(`^([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// deviceDir returns the sysfs directory of the device to expose: bdf's,
// checked to be an ivshmem device, or the one found.
func deviceDir(root, bdf string) (string, error) {
	if bdf == "" {
		return findDevice(root)
	}
	bdf = strings.ToLower(bdf)
	if !bdfRE.MatchString(bdf) {
		return "", fmt.Errorf("%q: %w", bdf, ErrBadAddress)
	}
	if len(bdf) == 7 {
		bdf = "0000:" + bdf
	}
	dir := filepath.Join(root, bdf)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%s: %w under %s", bdf, ErrNoSuchDevice, root)
	}
	if !isIvshmem(dir) {
		return "", fmt.Errorf("%s is %w", bdf, ErrNotIvshmem)
	}
	return dir, nil
}

// findDevice picks the ivshmem device holding a hint page; with one
// ivshmem device and no page on it yet (agent not started), that one.
func findDevice(root string) (string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return "", fmt.Errorf("listing PCI devices: %w", err)
	}
	var found []string
	for _, e := range ents {
		if dir := filepath.Join(root, e.Name()); isIvshmem(dir) {
			found = append(found, dir)
		}
	}
	sort.Strings(found)
	for _, dir := range found {
		if f, err := hintpage.Map(filepath.Join(dir, "resource2")); err == nil {
			f.Close()
			return dir, nil
		}
	}
	switch len(found) {
	case 0:
		return "", ErrNoDevice
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d ivshmem devices and none holds a hint page yet: pick one with --device", len(found))
}

func isIvshmem(dir string) bool {
	return readID(dir, "vendor") == vendorIvshmem && readID(dir, "device") == deviceIvshmem
}

func readID(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(string(b)))
}

// enable turns the device's memory decoding on: a device no driver has
// claimed is left disabled, and its BAR then reads as all ones.
func enable(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "enable"), []byte("1"), 0); err != nil {
		return fmt.Errorf("enabling %s: %w", filepath.Base(dir), err)
	}
	return nil
}

// checkBAR returns the BAR2 file of dir, refused when it cannot hold a
// one-slot page.
func checkBAR(dir string) (string, error) {
	res := filepath.Join(dir, "resource2")
	fi, err := os.Stat(res)
	if err != nil {
		return "", fmt.Errorf("BAR2 of %s: %w", filepath.Base(dir), err)
	}
	if !fi.Mode().IsRegular() || fi.Size() < int64(hintpage.Size(1)) {
		return "", fmt.Errorf("BAR2 of %s is %d bytes: a hint page needs at least %d", filepath.Base(dir), fi.Size(), hintpage.Size(1))
	}
	return res, nil
}
