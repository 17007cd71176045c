package libvirt

import (
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// jobImage returns the image dir when its guest can run jobs (make
// vmimage put vgpu-probe in it), or skips.
func jobImage(t *testing.T) string {
	t.Helper()
	dir := vmimages.DefaultDir()
	// The stamp's second line is the guest binary's hash, "none" without.
	if b, err := os.ReadFile(filepath.Join(dir, "stamp")); err != nil || len(strings.Split(string(b), "\n")) < 2 || strings.Split(string(b), "\n")[1] == "none" {
		libvirttest.Unavailable(t, "the vm image in %s has no vgpu-probe: build it with make vmimage", dir)
	}
	return dir
}

// lastCPU is the one CPU the tests' VMs share.
func lastCPU(t *testing.T) []int {
	cpus, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	return cpus[len(cpus)-1:]
}

// ours lists the running domains this process made.
func ours(t *testing.T, l *lv.Libvirt) []string {
	t.Helper()
	return running(t, l, namePrefix(os.Getpid()))
}

// running lists the running domains named prefix*.
func running(t *testing.T, l *lv.Libvirt, prefix string) []string {
	t.Helper()
	doms, _, err := l.ConnectListAllDomains(1, lv.ConnectListDomainsActive)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range doms {
		if strings.HasPrefix(d.Name, prefix) {
			names = append(names, d.Name)
		}
	}
	return names
}

// checkClean fails if a domain or a state directory of this process is left.
func checkClean(t *testing.T, l *lv.Libvirt) {
	t.Helper()
	if n := ours(t, l); len(n) > 0 {
		t.Errorf("domains left behind: %v", n)
	}
	if d, _ := filepath.Glob(filepath.Join(os.TempDir(), namePrefix(os.Getpid())+"*")); len(d) > 0 {
		t.Errorf("files left behind: %v", d)
	}
}

func loop(steps int) workload.Config {
	return workload.Config{Steps: steps, Work: 0, Profile: simdev.Fixed("kernel", 500*time.Microsecond, 0), Seed: 1}
}

func TestCreateRunDestroy(t *testing.T) {
	l := libvirttest.Connect(t)
	dir := jobImage(t)
	b := &Backend{ImageDir: dir, HostWork: 200 * time.Microsecond, Log: func(m string) { t.Log(m) }}
	cpus := lastCPU(t)
	topo := backend.Topology{Runner: backend.VM{Name: "runner", CPUs: cpus, QuotaCPUs: 0.5},
		Corunners: []backend.VM{{Name: "corunner1", CPUs: cpus, QuotaCPUs: 0.5}}, Period: 20 * time.Millisecond}
	t0 := time.Now()
	e, err := b.Create(t.Context(), topo, backend.Load{Kind: "while1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Destroy() })
	t.Logf("created in %v, work %d", time.Since(t0), b.work)
	if b.work <= 0 {
		t.Errorf("work not calibrated")
	}
	var pid int
	r, err := e.Run(t.Context(), backend.Workload{Config: loop(200), Device: "sim", Mode: hybridsync.ModeSpin}, func(p int) { pid = p })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spin: %+v", r)
	if r.Steps != 200 || r.WallS <= 0 || len(r.TIDs) != 1 || pid <= 0 {
		t.Errorf("result %+v, pid %d", r, pid)
	}
	if b.DomainName(pid) == "" || len(e.Corunners()) != 1 {
		t.Errorf("runner pid %d has no name, co-runners %v", pid, e.Corunners())
	}
	if err := e.Destroy(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, l)
}

func TestNoLibvirtd(t *testing.T) {
	b := &Backend{URI: filepath.Join(t.TempDir(), "missing.sock"), ImageDir: vmimages.DefaultDir()}
	if _, err := vmimages.Find(b.ImageDir); err != nil {
		b.ImageDir = fakeImage(t)
	}
	_, err := b.Create(t.Context(), backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{0}}}, backend.Load{})
	if !errors.Is(err, ErrNoLibvirt) || !strings.Contains(err.Error(), "missing.sock") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v, want one line naming the missing socket", err)
	}
	if err := b.Check(); !errors.Is(err, ErrNoLibvirt) {
		t.Fatalf("Check: %v", err)
	}
}

func TestMissingImage(t *testing.T) {
	b := &Backend{ImageDir: t.TempDir()}
	_, err := b.Create(t.Context(), backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{0}}}, backend.Load{})
	if !errors.Is(err, vmimages.ErrNotBuilt) || !strings.Contains(err.Error(), "vmlinuz") {
		t.Fatalf("err = %v, want the missing kernel named", err)
	}
}

func TestBadURI(t *testing.T) {
	b := &Backend{URI: "qemu+ssh://host/system", ImageDir: fakeImage(t)}
	if _, err := b.Create(t.Context(), backend.Topology{Runner: backend.VM{Name: "runner", CPUs: []int{0}}}, backend.Load{}); err == nil || !strings.Contains(err.Error(), "qemu+ssh") {
		t.Fatalf("err = %v", err)
	}
}

// fakeImage is an image dir whose kernel boots nowhere: enough for the
// checks that come before a domain exists.
func fakeImage(t *testing.T) string {
	dir := t.TempDir()
	for _, f := range []string{"vmlinuz", "initramfs.cpio.gz"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A guest that never reports (its kernel panics: the initramfs is empty)
// fails Create within the boot timeout, with the console's last line, and
// leaves nothing.
func TestGuestNeverReports(t *testing.T) {
	l := libvirttest.Connect(t)
	real := libvirttest.Image(t)
	dir := t.TempDir()
	// QEMU runs as its own user and must read the kernel.
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	k, err := os.ReadFile(real.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), k, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "initramfs.cpio.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	zw.Write([]byte("not a cpio archive"))
	zw.Close()
	f.Close()
	b := &Backend{ImageDir: dir, BootTimeout: 8 * time.Second}
	cpus := lastCPU(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = b.Create(ctx, backend.Topology{Runner: backend.VM{Name: "runner", CPUs: cpus}}, backend.Load{})
	if err == nil || !strings.Contains(err.Error(), "no ready line") || !strings.Contains(err.Error(), "gpurunner") {
		t.Fatalf("err = %v, want the domain that never reported named", err)
	}
	t.Log(err)
	checkClean(t, l)
}
