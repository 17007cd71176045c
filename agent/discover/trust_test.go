package discover

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runs processes as another user and reads theirs: needs root")
	}
}

// tenantFakes are the fake hypervisors an unprivileged user can start:
// any program named like one, with its vCPU thread names and identity
// flags (six QEMU names, Firecracker, Cloud Hypervisor, crosvm).
var tenantFakes = []struct {
	exe, threads string
	args         []string
}{
	{"qemu-system-x86_64", "CPU %d/KVM", []string{"-name", "guest=audit2,debug-threads=on"}},
	{"qemu-system-aarch64", "CPU %d/KVM", []string{"-name", "guest=arm,debug-threads=on"}},
	{"qemu-system-i386", "CPU %d/TCG", []string{"-name", "i386,debug-threads=on"}},
	{"qemu-kvm", "CPU %d/KVM", []string{"-name", "guest=ns_vmi,debug-threads=on"}},
	{"kvm", "CPU %d/KVM", []string{"-id", "100", "-name", "pve,debug-threads=on"}},
	{"qemu-system-ppc64", "CPU %d/TCG", []string{"-qmp", "unix:/root/priv/priv.sock,server=on,wait=off"}},
	{"firecracker", "fc_vcpu %d", []string{"--id", "fc-gpu-1"}},
	{"cloud-hypervisor", "vcpu%d", []string{"--api-socket", "path=/run/ch/ch.sock"}},
	{"crosvm", "crosvm_vcpu%d", []string{"run", "--socket", "/run/crosvm/cv.sock", "vmlinux"}},
}

// No process of a user the agent does not trust is a VM, whatever it is
// called and however it names its threads, not even the real QEMU
// binary run by that user; the same fake run by root from a root-owned
// directory is (so the test sees discovery work at all), and each
// untrusted one is counted.
func TestTenantHypervisorsAreNotVMs(t *testing.T) {
	needRoot(t)
	tenant := map[int]string{}
	for _, f := range tenantFakes {
		cmd := discovertest.Start(t, discovertest.TenantStandIn(t, discovertest.Tenant, f.exe), discovertest.Tenant, f.threads, 2, f.args...)
		tenant[cmd.Process.Pid] = f.exe
	}
	q := discovertest.QEMUAs(t, discovertest.Tenant, "-name", "guest=real-binary,debug-threads=on", "-smp", "2")
	tenant[q.Process.Pid] = "qemu-system-x86_64 (the real binary)"
	trusted := discovertest.StandIn(t, "qemu-system-x86_64", "CPU %d/KVM", 2, "-name", "guest=audit2,debug-threads=on")

	untrusted := 0
	s := NewScanner(Options{Log: zerolog.New(zerolog.NewTestWriter(t)), Untrusted: func(n int) { untrusted = n }})
	vm, ok := findPID(t, s, trusted.Process.Pid, 2, 10*time.Second)
	if !ok || vm.Name != "audit2" {
		t.Fatalf("root's QEMU stand-in: %+v (found %v), want VM audit2", vm, ok)
	}
	time.Sleep(time.Second) // the real QEMU has made its vCPU threads
	vms, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if exe, ok := tenant[vm.PID]; ok {
			t.Errorf("the tenant's %s (pid %d) taken for VM %q", exe, vm.PID, vm.Name)
		}
	}
	if untrusted < len(tenant) {
		t.Errorf("%d untrusted processes counted, want at least the tenant's %d", untrusted, len(tenant))
	}
}

// listenUnix serves a unix socket at path and counts the connections
// made to it and the bytes they sent.
func listenUnix(t *testing.T, path string) (conns, bytes *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns, bytes = &atomic.Int64{}, &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
				n, _ := io.Copy(io.Discard, c)
				bytes.Add(n)
			}()
		}
	}()
	return conns, bytes
}

// The agent is no deputy for a VM's QMP path: a VM (here of a user the
// test trusts) that names a socket in a directory its user cannot enter
// gets no connection made to it; a VM that names a socket another
// process serves (here the test's, which root may reach) gets a
// connection that is closed before a byte is sent.
func TestQMPOnlyAsTheVMsUserAndOnlyToTheVM(t *testing.T) {
	needRoot(t)
	private := filepath.Join(t.TempDir(), "priv") // under root's 0700 test directory
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	privConns, _ := listenUnix(t, filepath.Join(private, "priv.sock"))
	other := filepath.Join(t.TempDir(), "other.sock")
	otherConns, otherBytes := listenUnix(t, other)

	exe := discovertest.TenantStandIn(t, 0, "qemu-system-x86_64") // a root-owned executable
	asTenant := discovertest.Start(t, exe, discovertest.Tenant, "worker %d", 2,
		"-name", "priv", "-qmp", "unix:"+filepath.Join(private, "priv.sock")+",server=on,wait=off")
	asRoot := discovertest.Start(t, exe, -1, "worker %d", 2, "-name", "other", "-qmp", "unix:"+other+",server=on,wait=off")

	var logs strings.Builder
	trust := Trust{UIDs: []uint32{0, discovertest.Tenant}}
	s := NewScanner(Options{Trust: &trust, Log: zerolog.New(&logs)})
	for i := 0; i < 3; i++ {
		if _, err := s.Scan(); err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return time.Now().Add(time.Hour) } // past every retry wait
	}
	if n := privConns.Load(); n != 0 {
		t.Errorf("%d connections to a socket the VM's user (uid %d, pid %d) cannot reach", n, discovertest.Tenant, asTenant.Process.Pid)
	}
	if n := otherConns.Load(); n == 0 {
		t.Errorf("no connection to the socket root may reach: the test did not see the peer check")
	}
	time.Sleep(100 * time.Millisecond) // the last connection's bytes counted
	if n := otherBytes.Load(); n != 0 {
		t.Errorf("%d bytes sent to a socket another process than the VM (pid %d) serves", n, asRoot.Process.Pid)
	}
	for _, want := range []string{"may not search", "not by the VM's process"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logs.String())
		}
	}
}

// A path resolves as its process sees it: symbolic links inside its root,
// ".." (never above the root) and absolute targets; a directory its user
// may not search stops it.
func TestResolveAs(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "run", "vm"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "var"), 0o755))
	must(os.Symlink("/run", filepath.Join(root, "var", "run")))
	must(os.Symlink("../vm/qmp.sock", filepath.Join(root, "run", "vm", "link")))
	must(os.WriteFile(filepath.Join(root, "run", "vm", "qmp.sock"), nil, 0o600))
	must(os.Mkdir(filepath.Join(root, "run", "closed"), 0o700))
	must(os.WriteFile(filepath.Join(root, "run", "closed", "x"), nil, 0o666))
	must(os.Symlink("link2", filepath.Join(root, "loop1")))
	must(os.Symlink("loop1", filepath.Join(root, "link2")))
	must(os.Symlink("../../../../..", filepath.Join(root, "run", "up")))

	rootCred, user := cred{uid: 0}, cred{uid: 12345, gids: []uint32{12345}}
	for _, c := range []struct {
		path string
		c    cred
		want string // "" an error
	}{
		{"/var/run/vm/qmp.sock", rootCred, "/run/vm/qmp.sock"},
		{"/var/run/vm/link", user, "/run/vm/qmp.sock"},
		{"/run/vm/../vm/./qmp.sock", user, "/run/vm/qmp.sock"},
		{"/../../run/vm/qmp.sock", user, "/run/vm/qmp.sock"},  // ".." stops at the root
		{"/run/up/run/vm/qmp.sock", user, "/run/vm/qmp.sock"}, // so does a link's
		{"/run/closed/x", rootCred, "/run/closed/x"},
		{"/run/closed/x", user, ""},
		{"/loop1", rootCred, ""},
		{"run/vm/qmp.sock", rootCred, ""},
		{"/run/missing", rootCred, ""},
	} {
		f, st, err := resolveAs(root, c.path, c.c)
		if c.want == "" {
			if err == nil {
				f.Close()
				t.Errorf("%s as uid %d: resolved, want an error", c.path, c.c.uid)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s as uid %d: %v, want %q", c.path, c.c.uid, err, c.want)
			continue
		}
		f.Close()
		var want unix.Stat_t
		if err := unix.Stat(root+c.want, &want); err != nil {
			t.Fatal(err)
		}
		if st.Ino != want.Ino || st.Dev != want.Dev {
			t.Errorf("%s as uid %d: resolved to inode %d, want %q (inode %d)", c.path, c.c.uid, st.Ino, c.want, want.Ino)
		}
	}
}

func TestParseTrust(t *testing.T) {
	tr, err := ParseTrust("root, 107,0", false)
	if err != nil || len(tr.UIDs) != 2 || tr.UIDs[0] != 0 || tr.UIDs[1] != 107 {
		t.Errorf("got %+v %v", tr, err)
	}
	for _, bad := range []string{"", " , ", "no-such-user-here"} {
		if _, err := ParseTrust(bad, false); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want a one-line error", bad, err)
		}
	}
	if d := DefaultTrust(); len(d.UIDs) == 0 || d.UIDs[0] != 0 || len(d.PodUIDs) != 1 {
		t.Errorf("default trust %+v", d)
	}
}
