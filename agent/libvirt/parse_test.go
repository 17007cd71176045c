package libvirt

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		uri, socket, err string
	}{
		{"", DefaultSocket, ""},
		{"qemu:///system", DefaultSocket, ""},
		{"/var/run/libvirt/libvirt-sock", "/var/run/libvirt/libvirt-sock", ""},
		{"qemu:///system?socket=/tmp/x/sock", "/tmp/x/sock", ""},
		{"qemu+unix:///system?socket=/tmp/y", "/tmp/y", ""},
		{"qemu:///session", "", "want qemu:///system"},
		{"qemu+ssh://host/system", "", "want qemu:///system"},
		{"xen:///system", "", "want qemu:///system"},
		{"qemu:///system?socket=rel/sock", "", "not an absolute path"},
		{"qemu:///system?mode=legacy", "", `parameter "mode"`},
		{"relative/sock", "", "want qemu:///system"},
		{"qemu:///system?socket=%zz", "", "unsupported libvirt URI"},
	} {
		got, err := parseURI(tc.uri)
		if tc.err != "" {
			if err == nil || !errors.Is(err, ErrUnsupportedURI) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseURI(%q) error = %v, want ErrUnsupportedURI mentioning %q", tc.uri, err, tc.err)
			}
			continue
		}
		if err != nil || got.socket != tc.socket {
			t.Errorf("parseURI(%q) = %q, %v; want socket %q", tc.uri, got.socket, err, tc.socket)
		}
	}
}

func TestParseCPUSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"0", []int{0}, false},
		{"0-3", []int{0, 1, 2, 3}, false},
		{"0-3,^2,6", []int{0, 1, 3, 6}, false},
		{" 5 , 1-2 ", []int{1, 2, 5}, false},
		{"", nil, false},
		{"3-1", nil, true},
		{"a", nil, true},
		{"-1", nil, true},
		{"^0-3", nil, true},
		{"0-4000000000", nil, true},
	} {
		got, err := parseCPUSet(tc.in)
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUSet(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

// testdata/live-domain.xml is `virsh dumpxml` of a running domain rendered
// by vmimages (2 vCPUs pinned to CPUs 0 and 1, quota 50000/100000).
func TestParseDomainXML(t *testing.T) {
	b, err := os.ReadFile("testdata/live-domain.xml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseDomainXML(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if got.name != "vgpu-probe-test-manual" || got.uuid != "c697a7c3-585b-4745-acb0-9c494ba2f7ce" {
		t.Errorf("name/uuid = %q/%q", got.name, got.uuid)
	}
	if got.periodUS != 100000 || got.quotaUS != 50000 {
		t.Errorf("period/quota = %d/%d, want 100000/50000", got.periodUS, got.quotaUS)
	}
	if !slices.Equal(got.pins[0], []int{0}) || !slices.Equal(got.pins[1], []int{1}) || len(got.pins) != 2 {
		t.Errorf("pins = %v, want 0:[0] 1:[1]", got.pins)
	}

	for _, tc := range []struct{ xml, err string }{
		{"<domain><cputune><quota>-1</quota></cputune></domain>", ""},
		{"<domain><cputune><period>x</period></cputune></domain>", "period"},
		{"<domain><cputune><vcpupin vcpu='a' cpuset='0'/></cputune></domain>", "vcpupin"},
		{"<domain><cputune><vcpupin vcpu='0' cpuset='9-1'/></cputune></domain>", "vcpupin of vcpu 0"},
		{"<domain", "parse domain xml"},
	} {
		d, err := parseDomainXML(tc.xml)
		if tc.err == "" {
			if err != nil || d.quotaUS != 0 {
				t.Errorf("parseDomainXML(%q) = %+v, %v; want quota 0 (unlimited)", tc.xml, d, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseDomainXML(%q) error = %v, want one mentioning %q", tc.xml, err, tc.err)
		}
	}
}

// A reply recorded from QEMU 7.2 through `virsh qemu-monitor-command`.
const queryCPUsFastReply = `{"return":[{"thread-id":12156,"props":{"core-id":0,"thread-id":0,"socket-id":1},"qom-path":"/machine/unattached/device[2]","cpu-index":1,"target":"x86_64"},{"thread-id":12155,"props":{"core-id":0,"thread-id":0,"socket-id":0},"qom-path":"/machine/unattached/device[0]","cpu-index":0,"target":"x86_64"}],"id":"libvirt-411"}`

func TestParseQueryCPUsFast(t *testing.T) {
	got, err := ParseQueryCPUsFast(queryCPUsFastReply)
	if err != nil {
		t.Fatal(err)
	}
	want := []VCPU{{Index: 0, TID: 12155}, {Index: 1, TID: 12156}}
	if !slices.EqualFunc(got, want, func(a, b VCPU) bool { return a.Index == b.Index && a.TID == b.TID }) {
		t.Errorf("got %+v, want %+v (sorted by index)", got, want)
	}
	for _, tc := range []struct{ in, err string }{
		{`{"error":{"class":"CommandNotFound","desc":"nope"}}`, "CommandNotFound: nope"},
		{`{"return":[]}`, "no vCPUs"},
		{`{"return":[{"cpu-index":0}]}`, "without cpu-index or thread-id"},
		{`{"return":[{"cpu-index":0,"thread-id":5},{"cpu-index":0,"thread-id":6}]}`, "bad entry"},
		{`{"return":[{"cpu-index":0,"thread-id":-5}]}`, "bad entry"},
		{`{}`, `no "return"`},
		{`not json`, "parse query-cpus-fast reply"},
	} {
		if _, err := ParseQueryCPUsFast(tc.in); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseQueryCPUsFast(%s) error = %v, want one mentioning %q", tc.in, err, tc.err)
		}
	}
}

func TestPinSet(t *testing.T) {
	online := []int{0, 1, 2, 3}
	if got := pinSet(bitmapCPUs([]byte{0x0f}, 4), online); got != nil {
		t.Errorf("all online CPUs allowed: got %v, want unpinned (nil)", got)
	}
	if got := pinSet(bitmapCPUs([]byte{0x05}, 4), online); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("cpumap 0x05: got %v, want [0 2]", got)
	}
	// A 10-CPU host needs two bytes per map; bits past ncpus are ignored.
	if got := bitmapCPUs([]byte{0x00, 0xff}, 10); !slices.Equal(got, []int{8, 9}) {
		t.Errorf("two-byte map: got %v, want [8 9]", got)
	}
}

func TestSameRunAndEqual(t *testing.T) {
	a := Domain{Name: "a", UUID: "u", ID: 3, VCPUs: []VCPU{{Index: 0, TID: 10, CPUs: []int{1}}}, QuotaUS: 5000}
	b := a.clone()
	b.VCPUs[0].CPUs[0] = 2
	if !sameRun(a, b) || equal(a, b) {
		t.Errorf("a repin is the same run but not equal")
	}
	if a.VCPUs[0].CPUs[0] != 1 {
		t.Errorf("clone shares the CPUs slice")
	}
	c := a.clone()
	c.ID = 4
	if sameRun(a, c) {
		t.Errorf("a new libvirt id is a new run")
	}
}

func FuzzParseDomainXML(f *testing.F) {
	if b, err := os.ReadFile("testdata/live-domain.xml"); err == nil {
		f.Add(string(b))
	}
	f.Add("<domain><cputune><vcpupin vcpu='0' cpuset='0-3,^1'/></cputune></domain>")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDomainXML(s)
		if err != nil {
			return
		}
		if d.periodUS < 0 || d.quotaUS < 0 {
			t.Errorf("negative bandwidth %d/%d", d.periodUS, d.quotaUS)
		}
		for _, cpus := range d.pins {
			if len(cpus) > maxCPUSetSize || !slices.IsSorted(cpus) {
				t.Errorf("bad cpuset %v", cpus)
			}
		}
	})
}

func FuzzParseQueryCPUsFast(f *testing.F) {
	f.Add(queryCPUsFastReply)
	f.Add(`{"return":[{"cpu-index":0,"thread-id":1}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseQueryCPUsFast(s)
		if err != nil {
			return
		}
		if len(v) == 0 {
			t.Error("no error and no vCPUs")
		}
		for i := range v {
			if v[i].TID <= 0 || (i > 0 && v[i].Index <= v[i-1].Index) {
				t.Errorf("bad vCPU list %+v", v)
			}
		}
	})
}
