// Package vmimages describes the tiny test guest built by build.sh (Debian's
// cloud kernel + a busybox initramfs) and renders libvirt domain XML that
// boots it under TCG (domain type 'qemu'), with optional vCPU pinning,
// <cputune> bandwidth, an ivshmem-plain page and a serial log.
//
// TCG, not KVM: on the development and CI machines KVM is paravirtual (PVM)
// and cannot boot a stock kernel, while every TCG vCPU is still a real host
// thread that the host scheduler preempts, which is what vgpu-probe measures.
package vmimages

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"unicode"
	"unicode/utf8"
)

// ReadyLine is what the guest's init prints on its console once /proc and
// /sys are mounted; tests wait for it in the serial log.
const ReadyLine = "vgpu-probe-guest: ready"

// DefaultEmulator is Debian's QEMU binary for x86_64 guests.
const DefaultEmulator = "/usr/bin/qemu-system-x86_64"

// DefaultMemoryMiB is enough for the cloud kernel and the 1 MiB initramfs.
const DefaultMemoryMiB = 128

// baseCmdline sends the console to the first serial port (the serial log)
// and keeps the kernel to warnings so the log stays short.
const baseCmdline = "console=ttyS0 loglevel=4"

// ErrNotBuilt means build.sh has not produced the image in the directory.
var ErrNotBuilt = errors.New("vm image not built")

//go:embed domain.xml.tmpl
var domainTemplate string

//go:embed build.sh
var buildScript []byte

var tmpl = template.Must(template.New("domain").Funcs(template.FuncMap{
	"x":      escape,
	"cpuset": FormatCPUSet,
}).Parse(domainTemplate))

// Image is a built guest: a kernel and an initramfs for direct kernel boot.
type Image struct {
	Kernel string
	Initrd string
}

// DefaultDir is where build.sh puts the image when given no OUTDIR: the
// directory named by $VGPU_VMIMAGE_DIR, or else vmimages/cache in the source
// tree this package was compiled from (tests run from the tree, so that is
// where .ci/setup-libvirt.sh built it).
func DefaultDir() string {
	if d := os.Getenv("VGPU_VMIMAGE_DIR"); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return filepath.Join("vmimages", "cache")
	}
	return filepath.Join(filepath.Dir(file), "cache")
}

// Find returns the image in dir, or an error wrapping ErrNotBuilt.
func Find(dir string) (Image, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Image{}, fmt.Errorf("vm image dir %q: %w", dir, err)
	}
	img := Image{
		Kernel: filepath.Join(abs, "vmlinuz"),
		Initrd: filepath.Join(abs, "initramfs.cpio.gz"),
	}
	for _, f := range []string{img.Kernel, img.Initrd} {
		st, err := os.Stat(f)
		if err != nil || st.Size() == 0 {
			return Image{}, fmt.Errorf("%w: %s missing (build it with make vmimage, or vmimages/build.sh %s)", ErrNotBuilt, f, abs)
		}
	}
	return img, nil
}

// Build runs the build.sh embedded in this binary with dir as its OUTDIR, so
// a binary away from the source tree can still build the image. It returns
// at once when the image is already built. Needs root and apt.
func Build(ctx context.Context, dir string) error {
	f, err := os.CreateTemp("", "vgpu-probe-build-*.sh")
	if err != nil {
		return fmt.Errorf("build vm image: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(buildScript); err != nil {
		f.Close()
		return fmt.Errorf("build vm image: write script: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("build vm image: write script: %w", err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "/bin/sh", f.Name(), dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build vm image in %s: %w: %s", dir, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Shmem is an ivshmem-plain device. libvirt creates /dev/shm/Name on the
// host; the guest sees PCI 1af4:1110 with the memory as BAR 2. Not for
// the agent's hint pages: /dev/shm is every user's (QEMUArgs with
// hintpage.LibvirtArgs instead, docs/hints.md).
type Shmem struct {
	Name    string
	SizeMiB int // a power of two (QEMU requires it); 0 means 1
}

// Domain is everything the template needs. Zero values mean "leave it out".
type Domain struct {
	Name      string // [A-Za-z0-9][A-Za-z0-9._-]*, at most 64 bytes
	UUID      string // optional, 8-4-4-4-12 hex; libvirt generates one if empty
	VCPUs     int    // >= 1
	MemoryMiB int    // 0 means DefaultMemoryMiB
	Image     Image  // absolute paths
	Emulator  string // empty means DefaultEmulator
	// Cmdline is appended to the console arguments; Busy adds vgpu.busy=1
	// (one busy loop per vCPU in the guest).
	Cmdline string
	Busy    bool
	// Pin[i] is the host CPU set of vCPU i (<vcpupin>). Pin is empty or has
	// one entry per vCPU; an empty entry leaves that vCPU unpinned.
	Pin         [][]int
	EmulatorPin []int
	// PeriodUS and QuotaUS are <cputune> CFS bandwidth per vCPU; 0 = unset,
	// QuotaUS -1 = unlimited.
	PeriodUS int64
	QuotaUS  int64
	Shmem    *Shmem
	// SerialLog is an absolute file path that receives the guest console.
	SerialLog string
	// Type is the libvirt domain type: "" or TypeQEMU (TCG) or TypeKVM.
	Type string
	// Channel is a virtio-serial port to a unix socket on the host.
	Channel *Channel
	// HostDevs are PCI devices passed through ("0000:65:00.0"), a GPU.
	HostDevs []string
	// QEMUArgs are added to QEMU's command line (<qemu:commandline>):
	// the hint page's ivshmem device (hintpage.LibvirtArgs), over a file in
	// the agent's directory that libvirt's <shmem> cannot name.
	QEMUArgs []string
}

// Domain types.
const (
	TypeQEMU = "qemu" // TCG: works everywhere, slowly
	TypeKVM  = "kvm"
)

// Channel is a virtio-serial port. QEMU listens on Socket (mode bind);
// the guest sees the port under /sys/class/virtio-ports with Name.
type Channel struct {
	Socket string // absolute path
	Name   string // e.g. org.vgpu-probe.job.0
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	pciRE  = regexp.MustCompile(`^([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)
	uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// Limits libvirt enforces on <cputune>; checked here so a bad value fails
// before a round trip to the daemon, with a message naming the field.
const (
	minPeriodUS = 1000
	maxPeriodUS = 1000000
	minQuotaUS  = 1000
	maxQuotaUS  = 17592186044415
	maxVCPUs    = 255 // the i440fx 'pc' machine's limit
)

// ValidName reports whether s may be used as a domain or shmem name: it
// ends up in file names (/dev/shm/NAME, /run/libvirt/qemu/NAME.pid), so only
// a conservative set of characters is allowed.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Validate checks every field and returns the first problem found.
func (d Domain) Validate() error {
	if !ValidName(d.Name) {
		return fmt.Errorf("domain name %q: want 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit", d.Name)
	}
	if d.UUID != "" && !uuidRE.MatchString(d.UUID) {
		return fmt.Errorf("domain %s: uuid %q is not 8-4-4-4-12 hex", d.Name, d.UUID)
	}
	if d.VCPUs < 1 || d.VCPUs > maxVCPUs {
		return fmt.Errorf("domain %s: vcpus %d: want 1..%d", d.Name, d.VCPUs, maxVCPUs)
	}
	if d.MemoryMiB != 0 && (d.MemoryMiB < 32 || d.MemoryMiB > 1<<20) {
		return fmt.Errorf("domain %s: memory %d MiB: want 32..%d", d.Name, d.MemoryMiB, 1<<20)
	}
	for what, p := range map[string]string{"kernel": d.Image.Kernel, "initrd": d.Image.Initrd} {
		if err := checkPath(p, true); err != nil {
			return fmt.Errorf("domain %s: %s: %w", d.Name, what, err)
		}
	}
	if err := checkPath(d.Emulator, false); err != nil {
		return fmt.Errorf("domain %s: emulator: %w", d.Name, err)
	}
	if err := checkPath(d.SerialLog, false); err != nil {
		return fmt.Errorf("domain %s: serial log: %w", d.Name, err)
	}
	if !utf8.ValidString(d.Cmdline) {
		return fmt.Errorf("domain %s: cmdline is not valid UTF-8", d.Name)
	}
	for _, r := range d.Cmdline {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("domain %s: cmdline has a non-printable character %q", d.Name, r)
		}
	}
	if len(d.Pin) != 0 && len(d.Pin) != d.VCPUs {
		return fmt.Errorf("domain %s: pin has %d entries for %d vcpus", d.Name, len(d.Pin), d.VCPUs)
	}
	for i, set := range d.Pin {
		if err := checkCPUs(set); err != nil {
			return fmt.Errorf("domain %s: pin of vcpu %d: %w", d.Name, i, err)
		}
	}
	if err := checkCPUs(d.EmulatorPin); err != nil {
		return fmt.Errorf("domain %s: emulator pin: %w", d.Name, err)
	}
	if d.PeriodUS != 0 && (d.PeriodUS < minPeriodUS || d.PeriodUS > maxPeriodUS) {
		return fmt.Errorf("domain %s: period %d us: want %d..%d", d.Name, d.PeriodUS, minPeriodUS, maxPeriodUS)
	}
	if d.QuotaUS != 0 && d.QuotaUS != -1 && (d.QuotaUS < minQuotaUS || d.QuotaUS > maxQuotaUS) {
		return fmt.Errorf("domain %s: quota %d us: want -1 or %d..%d", d.Name, d.QuotaUS, minQuotaUS, int64(maxQuotaUS))
	}
	if d.Type != "" && d.Type != TypeQEMU && d.Type != TypeKVM {
		return fmt.Errorf("domain %s: type %q: want %s or %s", d.Name, d.Type, TypeQEMU, TypeKVM)
	}
	if c := d.Channel; c != nil {
		if err := checkPath(c.Socket, true); err != nil {
			return fmt.Errorf("domain %s: channel socket: %w", d.Name, err)
		}
		if !ValidName(c.Name) {
			return fmt.Errorf("domain %s: channel name %q: want 1-64 characters of [A-Za-z0-9._-]", d.Name, c.Name)
		}
	}
	for _, h := range d.HostDevs {
		if !pciRE.MatchString(h) {
			return fmt.Errorf("domain %s: hostdev %q: want a PCI address like 0000:65:00.0", d.Name, h)
		}
	}
	for _, a := range d.QEMUArgs {
		if !utf8.ValidString(a) || strings.ContainsFunc(a, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return fmt.Errorf("domain %s: QEMU argument %q: want printable UTF-8", d.Name, a)
		}
	}
	if s := d.Shmem; s != nil {
		if !ValidName(s.Name) {
			return fmt.Errorf("domain %s: shmem name %q: want 1-64 characters of [A-Za-z0-9._-]", d.Name, s.Name)
		}
		if s.SizeMiB < 0 || s.SizeMiB > 1024 || s.SizeMiB&(s.SizeMiB-1) != 0 {
			return fmt.Errorf("domain %s: shmem size %d MiB: want a power of two up to 1024", d.Name, s.SizeMiB)
		}
	}
	return nil
}

func checkPath(p string, required bool) error {
	if p == "" {
		if required {
			return errors.New("path is empty")
		}
		return nil
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("path %q is not absolute (libvirt resolves it in its own working directory)", p)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("path %q is not valid UTF-8", p)
	}
	for _, r := range p {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("path %q has a non-printable character", p)
		}
	}
	return nil
}

func checkCPUs(set []int) error {
	for _, c := range set {
		if c < 0 || c > 4095 {
			return fmt.Errorf("cpu %d out of range 0..4095", c)
		}
	}
	return nil
}

// Render validates d and returns its libvirt domain XML.
func Render(d Domain) (string, error) {
	if err := d.Validate(); err != nil {
		return "", err
	}
	v := view{Domain: d}
	if v.MemoryMiB == 0 {
		v.MemoryMiB = DefaultMemoryMiB
	}
	if v.Emulator == "" {
		v.Emulator = DefaultEmulator
	}
	if v.Shmem != nil && v.Shmem.SizeMiB == 0 {
		s := *v.Shmem
		s.SizeMiB = 1
		v.Shmem = &s
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, v); err != nil {
		return "", fmt.Errorf("render domain %s: %w", d.Name, err)
	}
	return b.String(), nil
}

// view adds the derived values the template asks for.
type view struct {
	Domain
}

func (v view) FullCmdline() string {
	parts := []string{baseCmdline}
	if v.Busy {
		parts = append(parts, "vgpu.busy=1")
	}
	if c := strings.TrimSpace(v.Cmdline); c != "" {
		parts = append(parts, c)
	}
	return strings.Join(parts, " ")
}

func (v view) DomainType() string {
	if v.Type == "" {
		return TypeQEMU
	}
	return v.Type
}

// pciAddr is a hostdev address split the way libvirt's XML wants it.
type pciAddr struct{ Domain, Bus, Slot, Function string }

func (v view) HostDevs() []pciAddr {
	var out []pciAddr
	for _, h := range v.Domain.HostDevs {
		m := pciRE.FindStringSubmatch(h)
		out = append(out, pciAddr{m[1], m[2], m[3], m[4]})
	}
	return out
}

func (v view) HasCputune() bool {
	pinned := slices.ContainsFunc(v.Pin, func(s []int) bool { return len(s) > 0 })
	return pinned || len(v.EmulatorPin) > 0 || v.PeriodUS != 0 || v.QuotaUS != 0
}

func escape(s string) (string, error) {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return "", err
	}
	// EscapeText leaves ' alone; the template quotes attributes with '.
	return strings.ReplaceAll(b.String(), "'", "&#39;"), nil
}

// FormatCPUSet renders CPUs the way libvirt writes cpusets: sorted, with
// runs collapsed ("0-3,6").
func FormatCPUSet(cpus []int) string {
	s := slices.Clone(cpus)
	slices.Sort(s)
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, strconv.Itoa(s[i])+"-"+strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
