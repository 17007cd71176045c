package vmimages

import (
	"encoding/xml"
	"strings"
	"testing"
)

func role() Role {
	return Role{Name: "vgpu-probe-run-1-1-gpurunner", Image: Image{Kernel: "/k/vmlinuz", Initrd: "/k/initrd"}, CPUs: []int{2, 3},
		PeriodUS: 20000, QuotaUS: 5000, Job: "vgpu.job=eyJ9", Channel: &Channel{Socket: "/run/x/r.sock", Name: "org.vgpu-probe.job.0"},
		SerialLog: "/run/x/r.console"}
}

func TestRoleDomains(t *testing.T) {
	r := role()
	x, err := Render(GPURunner(r, &Shmem{Name: "vgpu-probe-hints-r"}, nil, []string{"0000:65:00.0"}))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Type    string `xml:"type,attr"`
		VCPU    int    `xml:"vcpu"`
		Cputune struct {
			Pins []struct {
				VCPU   int    `xml:"vcpu,attr"`
				CPUSet string `xml:"cpuset,attr"`
			} `xml:"vcpupin"`
			Emulator struct {
				CPUSet string `xml:"cpuset,attr"`
			} `xml:"emulatorpin"`
			Quota int `xml:"quota"`
		} `xml:"cputune"`
		Cmdline string `xml:"os>cmdline"`
		Channel struct {
			Source struct {
				Path string `xml:"path,attr"`
			} `xml:"source"`
			Target struct {
				Name string `xml:"name,attr"`
			} `xml:"target"`
		} `xml:"devices>channel"`
		Shmem   []struct{} `xml:"devices>shmem"`
		HostDev struct {
			Addr struct {
				Bus  string `xml:"bus,attr"`
				Slot string `xml:"slot,attr"`
			} `xml:"source>address"`
		} `xml:"devices>hostdev"`
	}
	if err := xml.Unmarshal([]byte(x), &d); err != nil {
		t.Fatalf("%v\n%s", err, x)
	}
	if d.Type != TypeQEMU || d.VCPU != 2 || len(d.Cputune.Pins) != 2 || d.Cputune.Pins[1].CPUSet != "3" ||
		d.Cputune.Emulator.CPUSet != "2-3" || d.Cputune.Quota != 5000 {
		t.Errorf("cpu part wrong:\n%s", x)
	}
	if !strings.Contains(d.Cmdline, "vgpu.job=eyJ9") || d.Channel.Source.Path != "/run/x/r.sock" || d.Channel.Target.Name != "org.vgpu-probe.job.0" {
		t.Errorf("job or channel wrong:\n%s", x)
	}
	if len(d.Shmem) != 1 || d.HostDev.Addr.Bus != "0x65" || d.HostDev.Addr.Slot != "0x00" {
		t.Errorf("shmem or hostdev wrong:\n%s", x)
	}
	r.Type = TypeKVM
	x, err = Render(Corunner(r))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x, "<domain type='kvm'>") || strings.Contains(x, "<shmem") || strings.Contains(x, "<hostdev") {
		t.Errorf("corunner: want kvm, no shmem, no hostdev:\n%s", x)
	}
}

func TestRoleRejects(t *testing.T) {
	for name, mod := range map[string]func(*Domain){
		"type":    func(d *Domain) { d.Type = "xen" },
		"hostdev": func(d *Domain) { d.HostDevs = []string{"65:00.0'/><evil"} },
		"socket":  func(d *Domain) { d.Channel.Socket = "relative.sock" },
		"channel": func(d *Domain) { d.Channel.Name = "a name" },
	} {
		d := GPURunner(role(), nil, nil, nil)
		c := *d.Channel
		d.Channel = &c
		mod(&d)
		if _, err := Render(d); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestProbeType(t *testing.T) {
	typ, why := ProbeType()
	if (typ != TypeQEMU && typ != TypeKVM) || why == "" {
		t.Fatalf("ProbeType() = %q, %q", typ, why)
	}
	t.Logf("%s: %s", typ, why)
}
