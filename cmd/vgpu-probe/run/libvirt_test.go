package run

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

// --backend libvirt on a host without libvirtd or without the image, or
// with what the guest cannot run: one line naming what is missing, exit 2,
// nothing started.
func TestLibvirtBadInput(t *testing.T) {
	img := t.TempDir()
	for _, f := range []string{"vmlinuz", "initramfs.cpio.gz"} {
		os.WriteFile(filepath.Join(img, f), []byte("x"), 0o644)
	}
	nosock := filepath.Join(t.TempDir(), "libvirt-sock")
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no libvirtd":  {[]string{"--libvirt-uri", nosock, "--vm-image", img}, nosock},
		"no image":     {[]string{"--vm-image", t.TempDir()}, "vmlinuz"},
		"bad uri":      {[]string{"--libvirt-uri", "xen:///", "--vm-image", img}, "xen:///"},
		"workload cmd": {[]string{"--workload-cmd", "true"}, "--workload-cmd"},
		"corunner cmd": {[]string{"--corunner-cmd", "true"}, "--corunner-cmd"},
		"cuda":         {[]string{"--device", "cuda"}, "simulated GPU"},
		"domain type":  {[]string{"--domain-type", "xen"}, "--domain-type"},
		"boot timeout": {[]string{"--vm-boot-timeout", "0s"}, "timeout"},
	} {
		o, err := parse(t, append([]string{"--backend", "libvirt"}, c.args...)...)
		if err == nil || o != nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") || !errors.Is(err, usage.ErrBadInput) {
			t.Errorf("%s: %v: want one line of bad input naming %s", name, err, c.want)
		}
	}
}
