package libvirt

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// libvirt's capabilities name the user QEMU runs as in the DAC model's
// base label, per domain type; no DAC model is root.
func TestDACLabel(t *testing.T) {
	caps := `<capabilities><host>
<secmodel><model>none</model><doi>0</doi></secmodel>
<secmodel><model>dac</model><doi>0</doi><baselabel type='kvm'>+64055:+108</baselabel><baselabel type='qemu'>+64055:+64055</baselabel></secmodel>
</host></capabilities>`
	for typ, want := range map[string][2]int{"kvm": {64055, 108}, "qemu": {64055, 64055}, "other": {64055, 108}} {
		uid, gid, err := dacLabel(caps, typ)
		if err != nil || uid != want[0] || gid != want[1] {
			t.Errorf("%s: %d:%d %v, want %v", typ, uid, gid, err, want)
		}
	}
	if uid, gid, err := dacLabel(`<capabilities><host></host></capabilities>`, "kvm"); err != nil || uid != 0 || gid != 0 {
		t.Errorf("no DAC model: %d:%d %v, want root", uid, gid, err)
	}
	if _, _, err := dacLabel(`<capabilities><host><secmodel><model>dac</model><baselabel type='kvm'>x</baselabel></secmodel></host></capabilities>`, "kvm"); err == nil {
		t.Error("a label that is no +UID:+GID was taken")
	}
}

// A libvirt domain gets the hint page the way the backend gives it (made
// in the agent's directory before the domain starts, owned by libvirt's
// QEMU user; the device as <qemu:commandline>): the real libvirtd's QEMU
// maps that page, not the file a tenant (nobody) planted where libvirt's
// <shmem> would have looked (/dev/shm), and the tenant can open neither
// the page nor anything where it lives.
func TestLibvirtDomainPage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the page is made in the agent's directory")
	}
	l := libvirttest.Connect(t)
	name := libvirttest.Name(t)
	planted := filepath.Join("/dev/shm", hintpage.FileName(name))
	tenant(t, "truncate -s 1M "+planted+" && chmod 666 "+planted)
	t.Cleanup(func() { os.Remove(planted) })

	uid, gid, err := qemuOwner(l, vmimages.TypeQEMU)
	if err != nil {
		t.Fatal(err)
	}
	page, err := hints.PreparePage(hints.DefaultDir, name, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(page) })
	if tenant(t, "exec 3<"+page) {
		t.Errorf("the tenant opened %s before the domain started", page)
	}
	libvirttest.StartDomain(t, l, vmimages.Domain{Name: name, VCPUs: 1, Type: vmimages.TypeQEMU,
		QEMUArgs: hintpage.LibvirtArgs(hints.DefaultDir, name)})
	pid, err := libvirttest.QEMUPid(name)
	if err != nil {
		t.Fatal(err)
	}
	var st, pst syscall.Stat_t
	if err := syscall.Stat(page, &st); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !maps(t, pid, st.Dev, st.Ino); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("libvirt's QEMU (pid %d) does not map the page %s", pid, page)
		}
	}
	if syscall.Stat(planted, &pst) == nil && maps(t, pid, pst.Dev, pst.Ino) {
		t.Errorf("libvirt's QEMU maps the tenant's %s", planted)
	}
	if int(st.Uid) != uid || st.Mode&0o7777 != 0o600 {
		t.Errorf("page: owner %d mode %#o, want QEMU's %d and 0600", st.Uid, st.Mode&0o7777, uid)
	}
	if tenant(t, "exec 3<"+page) {
		t.Errorf("the tenant opened %s while QEMU maps it", page)
	}
}

// tenant runs a shell script as nobody and reports whether it exited 0.
func tenant(t *testing.T, script string) bool {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	return cmd.Run() == nil
}

// maps tells whether process pid maps the file dev:ino.
func maps(t *testing.T, pid int, dev, ino uint64) bool {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x %d", (dev>>8)&0xfff|(dev>>32)&^0xfff, dev&0xff|(dev>>12)&^0xff, ino)
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 5 && fs[3]+" "+fs[4] == want {
			return true
		}
	}
	return false
}
