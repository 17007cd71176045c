package run

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend/libvirt"
	"github.com/vgpu-probe/vgpu-probe/internal/progress"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// LibvirtOptions are the flags of --backend libvirt.
type LibvirtOptions struct {
	URI         string
	ImageDir    string
	DomainType  string
	BootTimeout time.Duration
	JobTimeout  time.Duration
}

// domainTypes are the values of --domain-type: auto picks one of the
// others (vmimages.ProbeType).
var domainTypes = []string{"auto", vmimages.TypeKVM, vmimages.TypeQEMU}

func (l *LibvirtOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&l.URI, "libvirt-uri", libvirt.DefaultURI, "--backend libvirt: the libvirtd to create the VMs with (qemu:///system, or a socket path)")
	f.StringVar(&l.ImageDir, "vm-image", "", "--backend libvirt: directory of the guest image from make vmimage (default: vmimages/cache, or $VGPU_VMIMAGE_DIR)")
	f.StringVar(&l.DomainType, "domain-type", "auto", "--backend libvirt: kvm, qemu (TCG), or auto: kvm where /dev/kvm can boot a stock kernel")
	f.DurationVar(&l.BootTimeout, "vm-boot-timeout", libvirt.DefaultBootTimeout, "--backend libvirt: how long a guest may take to boot and report ready")
	f.DurationVar(&l.JobTimeout, "vm-job-timeout", libvirt.DefaultJobTimeout, "--backend libvirt: how long one measurement in the guest may take")
}

// validateLibvirt rejects what the guest cannot run and says in one line
// what this host lacks (the image, libvirtd), before anything starts.
func (o *Options) validateLibvirt() error {
	if o.WorkloadCmd != "" || o.CorunnerCmd != "" {
		return errors.New("--backend libvirt runs the built-in workload and co-runners in its guests: --workload-cmd and --corunner-cmd are for --backend local")
	}
	if o.Device != "sim" {
		return fmt.Errorf("--backend libvirt: --device %s: the guest image has the simulated GPU only", o.Device)
	}
	if !slices.Contains(domainTypes, o.Libvirt.DomainType) {
		return fmt.Errorf("--domain-type %q: want auto, kvm or qemu", o.Libvirt.DomainType)
	}
	if o.Libvirt.BootTimeout <= 0 || o.Libvirt.JobTimeout <= 0 {
		return errors.New("--vm-boot-timeout and --vm-job-timeout must be positive")
	}
	return o.libvirtBackend(nil).Check()
}

func (o *Options) libvirtBackend(p *progress.Bar) *libvirt.Backend {
	b := &libvirt.Backend{URI: o.Libvirt.URI, ImageDir: o.Libvirt.ImageDir, HostWork: time.Duration(o.HostUS * 1e3),
		BootTimeout: o.Libvirt.BootTimeout, JobTimeout: o.Libvirt.JobTimeout}
	if o.Libvirt.DomainType != "auto" {
		b.Type = o.Libvirt.DomainType
	}
	if p != nil {
		b.Log = p.Note
	}
	return b
}
