package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// asTenant runs a shell script as the unprivileged tenant (nobody, no
// supplementary groups) and reports whether it exited 0.
func asTenant(t *testing.T, script string) bool {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: discovertest.Tenant, Gid: discovertest.Tenant}}
	cmd.Dir = "/"
	return cmd.Run() == nil
}

// memPath is the mem-path of the memory-backend-file in QEMU arguments.
func memPath(t *testing.T, args []string) string {
	t.Helper()
	for _, a := range args {
		for _, kv := range strings.Split(strings.ReplaceAll(a, ",,", "\x00"), ",") {
			if p, ok := strings.CutPrefix(kv, "mem-path="); ok {
				return strings.ReplaceAll(p, "\x00", ",")
			}
		}
	}
	t.Fatalf("no mem-path in %q", args)
	return ""
}

// mapsInode tells whether process pid maps the file dev:ino.
func mapsInode(t *testing.T, pid int, dev, ino uint64) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%02x:%02x %d", (dev>>8)&0xfff|(dev>>32)&^0xfff, dev&0xff|(dev>>12)&^0xff, ino)
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && strings.Join(f[3:5], " ") == want {
			return true
		}
	}
	return false
}

// A tenant (nobody) who plants a VM's page file before its QEMU starts,
// in the directory pages used to live in (/dev/shm) and in the one
// hints-args names, who tries to open it as soon as it exists and while
// QEMU runs, and to swap it for a symlink to a file of theirs, never has
// QEMU map a file of theirs and never reads the page QEMU maps: root
// runs `agent hints-args VM` (the default directory) and starts a real
// QEMU (TCG) with what it prints, as a start script would.
func TestTenantCannotTakePage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: hints-args makes pages as root, the tenant is another user")
	}
	vm := "tenant-page-" + strconv.Itoa(os.Getpid())
	name := hintpage.FileName(vm)
	mine := filepath.Join(os.TempDir(), "vgpu-probe-tenant-"+strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { removeTenants(mine) })
	if !asTenant(t, "truncate -s 1M "+mine) {
		t.Fatal("the tenant could not make their own file")
	}
	var tenantSt syscall.Stat_t
	if err := syscall.Stat(mine, &tenantSt); err != nil {
		t.Fatal(err)
	}
	// The tenant's plants, before anything of the VM exists.
	for _, d := range []string{"/dev/shm", "/run/vgpu-probe/hints"} {
		p := filepath.Join(d, name)
		t.Cleanup(func() { removeTenants(p) })
		asTenant(t, "truncate -s 1M "+p+" && chmod 666 "+p)
	}

	var out bytes.Buffer
	cmd := NewCmd(nil)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"hints-args", vm})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("hints-args: %v: %s", err, out.String())
	}
	args := strings.Fields(out.String())
	page := memPath(t, args)
	t.Cleanup(func() { os.Remove(page) })
	if asTenant(t, "exec 3<"+page) {
		t.Errorf("the tenant opened %s after hints-args, before QEMU started", page)
	}
	if asTenant(t, "ln -sf "+mine+" "+page+" || { rm -f "+page+" && ln -s "+mine+" "+page+"; }") {
		t.Errorf("the tenant swapped %s for a symlink", page)
	}

	qemu := discovertest.QEMU(t, append([]string{"-name", "guest=" + vm}, args...)...)
	var st syscall.Stat_t
	if err := syscall.Lstat(page, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid == discovertest.Tenant || st.Mode&0o077 != 0 {
		t.Errorf("%s: mode %#o uid %d; want a regular file, 0600, not the tenant's", page, st.Mode, st.Uid)
	}
	// QEMU maps its memory backends while it starts, on a busy machine
	// maybe after discovertest.QEMU returned.
	for deadline := time.Now().Add(time.Minute); !mapsInode(t, qemu.Process.Pid, st.Dev, st.Ino); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("QEMU does not map %s (inode %d)", page, st.Ino)
		}
	}
	if mapsInode(t, qemu.Process.Pid, tenantSt.Dev, tenantSt.Ino) {
		t.Error("QEMU maps the tenant's own file")
	}
	for _, d := range []string{"/dev/shm", "/run/vgpu-probe/hints"} {
		var pst syscall.Stat_t
		if syscall.Lstat(filepath.Join(d, name), &pst) == nil && pst.Uid == discovertest.Tenant && mapsInode(t, qemu.Process.Pid, pst.Dev, pst.Ino) {
			t.Errorf("QEMU maps the file the tenant planted in %s", d)
		}
	}
	if asTenant(t, "exec 3<"+page) {
		t.Errorf("the tenant opened %s while QEMU maps it", page)
	}
}

// removeTenants removes path if it is the tenant's (what the test had
// them plant), and nothing else.
func removeTenants(path string) {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) == nil && st.Uid == discovertest.Tenant {
		os.Remove(path)
	}
}
