package vmimages

import (
	"bufio"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parsed is the part of the rendered XML the tests check, read back with
// encoding/xml so escaping is checked by a real parser.
type parsed struct {
	Type    string `xml:"type,attr"`
	Name    string `xml:"name"`
	UUID    string `xml:"uuid"`
	Memory  int    `xml:"memory"`
	VCPU    int    `xml:"vcpu"`
	CPUTune *struct {
		Period  int64 `xml:"period"`
		Quota   int64 `xml:"quota"`
		VCPUPin []struct {
			VCPU   int    `xml:"vcpu,attr"`
			CPUSet string `xml:"cpuset,attr"`
		} `xml:"vcpupin"`
		EmulatorPin *struct {
			CPUSet string `xml:"cpuset,attr"`
		} `xml:"emulatorpin"`
	} `xml:"cputune"`
	OS struct {
		Kernel  string `xml:"kernel"`
		Initrd  string `xml:"initrd"`
		Cmdline string `xml:"cmdline"`
	} `xml:"os"`
	Devices struct {
		Emulator string `xml:"emulator"`
		Serial   []struct {
			Type   string `xml:"type,attr"`
			Source struct {
				Path string `xml:"path,attr"`
			} `xml:"source"`
		} `xml:"serial"`
		Shmem []struct {
			Name  string `xml:"name,attr"`
			Model struct {
				Type string `xml:"type,attr"`
			} `xml:"model"`
			Size int `xml:"size"`
		} `xml:"shmem"`
	} `xml:"devices"`
}

func render(t *testing.T, d Domain) parsed {
	t.Helper()
	s, err := Render(d)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	var p parsed
	if err := xml.Unmarshal([]byte(s), &p); err != nil {
		t.Fatalf("rendered XML does not parse: %v\n%s", err, s)
	}
	return p
}

var img = Image{Kernel: "/img/vmlinuz", Initrd: "/img/initramfs.cpio.gz"}

func TestRenderMinimal(t *testing.T) {
	p := render(t, Domain{Name: "vm1", VCPUs: 1, Image: img})
	if p.Type != "qemu" {
		t.Errorf("domain type %q, want qemu (TCG)", p.Type)
	}
	if p.Name != "vm1" || p.VCPU != 1 || p.Memory != DefaultMemoryMiB {
		t.Errorf("name/vcpu/memory = %q/%d/%d", p.Name, p.VCPU, p.Memory)
	}
	if p.CPUTune != nil {
		t.Errorf("unexpected <cputune> without pinning or bandwidth")
	}
	if p.OS.Kernel != img.Kernel || p.OS.Initrd != img.Initrd || p.OS.Cmdline != baseCmdline {
		t.Errorf("os = %+v", p.OS)
	}
	if p.Devices.Emulator != DefaultEmulator || len(p.Devices.Serial) != 0 || len(p.Devices.Shmem) != 0 {
		t.Errorf("devices = %+v", p.Devices)
	}
}

func TestRenderFull(t *testing.T) {
	p := render(t, Domain{
		Name:        "vm-2.full_x",
		UUID:        "c697a7c3-585b-4745-acb0-9c494ba2f7ce",
		VCPUs:       3,
		MemoryMiB:   256,
		Image:       img,
		Busy:        true,
		Cmdline:     "foo=1",
		Pin:         [][]int{{0}, nil, {3, 1, 2, 2}},
		EmulatorPin: []int{5},
		PeriodUS:    100000,
		QuotaUS:     30000,
		Shmem:       &Shmem{Name: "hint-vm2"},
		SerialLog:   "/var/log/vm2.log",
	})
	if p.UUID != "c697a7c3-585b-4745-acb0-9c494ba2f7ce" || p.VCPU != 3 || p.Memory != 256 {
		t.Errorf("uuid/vcpu/memory = %q/%d/%d", p.UUID, p.VCPU, p.Memory)
	}
	ct := p.CPUTune
	if ct == nil {
		t.Fatal("no <cputune>")
	}
	if ct.Period != 100000 || ct.Quota != 30000 {
		t.Errorf("period/quota = %d/%d", ct.Period, ct.Quota)
	}
	// vCPU 1 has no pin entry: it stays unpinned.
	if len(ct.VCPUPin) != 2 || ct.VCPUPin[0].VCPU != 0 || ct.VCPUPin[0].CPUSet != "0" ||
		ct.VCPUPin[1].VCPU != 2 || ct.VCPUPin[1].CPUSet != "1-3" {
		t.Errorf("vcpupin = %+v, want 0:0 and 2:1-3", ct.VCPUPin)
	}
	if ct.EmulatorPin == nil || ct.EmulatorPin.CPUSet != "5" {
		t.Errorf("emulatorpin = %+v", ct.EmulatorPin)
	}
	if p.OS.Cmdline != baseCmdline+" vgpu.busy=1 foo=1" {
		t.Errorf("cmdline = %q", p.OS.Cmdline)
	}
	if len(p.Devices.Serial) != 1 || p.Devices.Serial[0].Type != "file" || p.Devices.Serial[0].Source.Path != "/var/log/vm2.log" {
		t.Errorf("serial = %+v", p.Devices.Serial)
	}
	if len(p.Devices.Shmem) != 1 || p.Devices.Shmem[0].Name != "hint-vm2" ||
		p.Devices.Shmem[0].Model.Type != "ivshmem-plain" || p.Devices.Shmem[0].Size != 1 {
		t.Errorf("shmem = %+v", p.Devices.Shmem)
	}
}

// Values that are not validated to a safe alphabet (paths, cmdline) must
// survive the round trip through XML unchanged, whatever they contain.
func TestRenderEscapes(t *testing.T) {
	nasty := `a&b<c>d'e"f`
	p := render(t, Domain{
		Name:      "vm",
		VCPUs:     1,
		Image:     Image{Kernel: "/k/" + nasty, Initrd: "/i/" + nasty},
		Cmdline:   "x=" + nasty,
		SerialLog: "/s/" + nasty,
	})
	if p.OS.Kernel != "/k/"+nasty || p.OS.Initrd != "/i/"+nasty || !strings.HasSuffix(p.OS.Cmdline, "x="+nasty) ||
		p.Devices.Serial[0].Source.Path != "/s/"+nasty {
		t.Errorf("escaping lost data: %+v / %+v", p.OS, p.Devices.Serial)
	}
}

func TestValidate(t *testing.T) {
	ok := Domain{Name: "vm", VCPUs: 2, Image: img}
	for _, tc := range []struct {
		name string
		edit func(*Domain)
		want string
	}{
		{"empty name", func(d *Domain) { d.Name = "" }, "domain name"},
		{"name with <", func(d *Domain) { d.Name = "a<b" }, "domain name"},
		{"name with slash", func(d *Domain) { d.Name = "../x" }, "domain name"},
		{"name with space", func(d *Domain) { d.Name = "a b" }, "domain name"},
		{"long name", func(d *Domain) { d.Name = strings.Repeat("a", 65) }, "domain name"},
		{"zero vcpus", func(d *Domain) { d.VCPUs = 0 }, "vcpus 0"},
		{"negative vcpus", func(d *Domain) { d.VCPUs = -1 }, "vcpus -1"},
		{"bad uuid", func(d *Domain) { d.UUID = "nope" }, "uuid"},
		{"tiny memory", func(d *Domain) { d.MemoryMiB = 8 }, "memory"},
		{"no kernel", func(d *Domain) { d.Image.Kernel = "" }, "kernel: path is empty"},
		{"relative initrd", func(d *Domain) { d.Image.Initrd = "cache/initrd" }, "not absolute"},
		{"relative serial", func(d *Domain) { d.SerialLog = "serial.log" }, "serial log"},
		{"newline in cmdline", func(d *Domain) { d.Cmdline = "a\nb" }, "non-printable"},
		{"pin count", func(d *Domain) { d.Pin = [][]int{{0}} }, "1 entries for 2 vcpus"},
		{"negative cpu", func(d *Domain) { d.Pin = [][]int{{0}, {-1}} }, "pin of vcpu 1"},
		{"short period", func(d *Domain) { d.PeriodUS = 10 }, "period"},
		{"small quota", func(d *Domain) { d.QuotaUS = 5 }, "quota"},
		{"bad shmem name", func(d *Domain) { d.Shmem = &Shmem{Name: "a/b"} }, "shmem name"},
		{"shmem size", func(d *Domain) { d.Shmem = &Shmem{Name: "s", SizeMiB: 3} }, "power of two"},
	} {
		d := ok
		tc.edit(&d)
		_, err := Render(d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error spans lines: %q", tc.name, err)
		}
	}
	if _, err := Render(ok); err != nil {
		t.Errorf("valid domain: %v", err)
	}
	q := ok
	q.QuotaUS = -1
	if _, err := Render(q); err != nil {
		t.Errorf("quota -1 (unlimited) rejected: %v", err)
	}
}

func TestFormatCPUSet(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{6, 0, 2, 1, 1}, "0-2,6"},
		{[]int{1, 3, 5}, "1,3,5"},
	} {
		if got := FormatCPUSet(tc.in); got != tc.want {
			t.Errorf("FormatCPUSet(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	if _, err := Find(dir); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "build.sh") {
		t.Errorf("empty dir: error %v, want ErrNotBuilt naming build.sh", err)
	}
	for _, f := range []string{"vmlinuz", "initramfs.cpio.gz"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Find(dir)
	if err != nil || got.Kernel != filepath.Join(dir, "vmlinuz") || got.Initrd != filepath.Join(dir, "initramfs.cpio.gz") {
		t.Errorf("Find = %+v, %v", got, err)
	}
}

// The embedded build script is the file next to this package, so Build and
// `vmimages/build.sh` produce the same image (and the same stamp).
func TestEmbeddedBuildScript(t *testing.T) {
	b, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(buildScript) {
		t.Error("embedded build.sh differs from the file")
	}
}

func FuzzRender(f *testing.F) {
	f.Add("vm", "console=ttyS0", "/k", 2)
	f.Add("a<b", "x&y", "/k'\"", 1)
	f.Fuzz(func(t *testing.T, name, cmdline, kernel string, vcpus int) {
		d := Domain{Name: name, VCPUs: vcpus, Cmdline: cmdline, Image: Image{Kernel: kernel, Initrd: "/i"}}
		s, err := Render(d)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("multi-line error %q", err)
			}
			return
		}
		var p parsed
		if err := xml.Unmarshal([]byte(s), &p); err != nil {
			t.Fatalf("rendered XML does not parse: %v\n%s", err, s)
		}
		if p.Name != name || p.OS.Kernel != kernel || p.VCPU != vcpus {
			t.Errorf("round trip: got %q/%q/%d, want %q/%q/%d", p.Name, p.OS.Kernel, p.VCPU, name, kernel, vcpus)
		}
	})
}

// builtImage returns the image in DefaultDir, or skips: building it needs
// root and apt, which unit tests do not assume.
func builtImage(t *testing.T) (string, Image) {
	t.Helper()
	dir := DefaultDir()
	img, err := Find(dir)
	if err != nil {
		t.Skipf("%v: build it with vmimages/build.sh or .ci/setup-libvirt.sh", err)
	}
	return dir, img
}

// Build through the embedded copy of build.sh must see the image that
// vmimages/build.sh made as current (same stamp) and leave it alone.
func TestBuildIsIdempotent(t *testing.T) {
	dir, img := builtImage(t)
	if os.Geteuid() != 0 {
		t.Skip("build.sh needs root")
	}
	before := map[string]time.Time{}
	for _, f := range []string{img.Kernel, img.Initrd, filepath.Join(dir, "stamp")} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		before[f] = st.ModTime()
	}
	if err := Build(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	for f, m := range before {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if !st.ModTime().Equal(m) {
			t.Errorf("%s was rewritten by a second build", f)
		}
	}
}

// The initramfs must hold what the guest needs to reach its ready line:
// /init (executable), busybox, and the /dev/console node the kernel opens
// for init's stdio before anything is mounted.
func TestInitramfsContents(t *testing.T) {
	_, img := builtImage(t)
	f, err := os.Open(img.Initrd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readNewc(zr)
	if err != nil {
		t.Fatal(err)
	}
	init, ok := entries["init"]
	if !ok || init.mode&0o170000 != 0o100000 || init.mode&0o111 == 0 {
		t.Errorf("init: %+v, want an executable regular file", init)
	}
	if !strings.Contains(string(init.data), ReadyLine) {
		t.Errorf("init does not print %q", ReadyLine)
	}
	if bb, ok := entries["bin/busybox"]; !ok || len(bb.data) < 100000 {
		t.Errorf("bin/busybox missing or too small for busybox-static")
	}
	c, ok := entries["dev/console"]
	if !ok || c.mode&0o170000 != 0o020000 || c.rdevMajor != 5 || c.rdevMinor != 1 {
		t.Errorf("dev/console: %+v, want char device 5:1", c)
	}
}

type cpioEntry struct {
	mode                 uint64
	rdevMajor, rdevMinor uint64
	data                 []byte
}

// readNewc reads a "newc" (SVR4, no CRC) cpio archive, the format the
// kernel unpacks as initramfs.
func readNewc(r io.Reader) (map[string]cpioEntry, error) {
	br := bufio.NewReader(r)
	out := map[string]cpioEntry{}
	pos := 0
	skip := func(n int) error {
		_, err := br.Discard(n)
		pos += n
		return err
	}
	pad4 := func() error { return skip((4 - pos%4) % 4) }
	for {
		hdr := make([]byte, 110)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return nil, fmt.Errorf("cpio header at %d: %w", pos, err)
		}
		pos += 110
		if string(hdr[:6]) != "070701" {
			return nil, fmt.Errorf("cpio header at %d: magic %q", pos-110, hdr[:6])
		}
		field := func(i int) uint64 {
			v, _ := strconv.ParseUint(string(hdr[6+8*i:14+8*i]), 16, 64)
			return v
		}
		name := make([]byte, field(11))
		if _, err := io.ReadFull(br, name); err != nil {
			return nil, err
		}
		pos += len(name)
		if err := pad4(); err != nil {
			return nil, err
		}
		n := strings.TrimPrefix(strings.TrimRight(string(name), "\x00"), "./")
		if n == "TRAILER!!!" {
			return out, nil
		}
		data := make([]byte, field(6))
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, err
		}
		pos += len(data)
		if err := pad4(); err != nil {
			return nil, err
		}
		out[n] = cpioEntry{mode: field(1), rdevMajor: field(9), rdevMinor: field(10), data: data}
	}
}

// QEMUArgs come back from the XML as they were (a quote, a comma, an
// ampersand), in <qemu:commandline> of libvirt's qemu namespace, which
// the root element declares; a domain without them declares nothing.
func TestRenderQEMUArgs(t *testing.T) {
	args := []string{"-object", "memory-backend-file,id=h,mem-path=/run/a,,b'c&d/p,size=1M,share=on", "-device", "ivshmem-plain,memdev=h"}
	s, err := Render(Domain{Name: "vm", VCPUs: 1, Image: img, QEMUArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Args []struct {
			Value string `xml:"value,attr"`
		} `xml:"http://libvirt.org/schemas/domain/qemu/1.0 commandline>arg"`
	}
	if err := xml.Unmarshal([]byte(s), &p); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	var got []string
	for _, a := range p.Args {
		got = append(got, a.Value)
	}
	if strings.Join(got, "\n") != strings.Join(args, "\n") {
		t.Errorf("args %q, want %q\n%s", got, args, s)
	}
	plain, _ := Render(Domain{Name: "vm", VCPUs: 1, Image: img})
	if strings.Contains(plain, "qemu:") {
		t.Errorf("a domain without QEMUArgs names the qemu namespace:\n%s", plain)
	}
	if _, err := Render(Domain{Name: "vm", VCPUs: 1, Image: img, QEMUArgs: []string{"a\nb"}}); err == nil {
		t.Error("an argument with a newline was rendered")
	}
}
