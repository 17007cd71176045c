package discover

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
)

// bigFakes are fakes of each hypervisor whose identity flag takes a
// whole argument of the largest size exec takes (a name, or a socket
// that names the VM); the VM's name starts with prefix, then 'x's.
var bigFakes = []struct {
	exe, threads string
	args         []string
	prefix       string
}{
	{"firecracker", "fc_vcpu %d", []string{"--id", discovertest.LongArg("fc-", "")}, "fc-"},
	{"cloud-hypervisor", "vcpu%d", []string{"--api-socket", discovertest.LongArg("/run/ch-", ".sock")}, "ch-"},
	{"crosvm", "crosvm_vcpu%d", []string{"run", "--socket", discovertest.LongArg("/run/cv-", ".sock")}, "cv-"},
	{"qemu-system-x86_64", "CPU %d/KVM", []string{"-name", discovertest.LongArg("guest=q", ",debug-threads=on")}, "q"},
}

// Of a process it does not trust, the scanner keeps its identity (pid,
// start time, kind) and why it is not trusted, nothing that its user
// wrote: not its name, threads or QMP socket, from command lines of
// 2 MB with the name in a 128 KiB argument.
func TestUntrustedKeepsOnlyIdentity(t *testing.T) {
	needRoot(t)
	tenant := map[int]string{}
	for _, f := range bigFakes {
		exe := discovertest.TenantStandIn(t, discovertest.Tenant, f.exe)
		cmd := discovertest.Start(t, exe, discovertest.Tenant, f.threads, 2, discovertest.LongCommandLine(12, f.args...)...)
		tenant[cmd.Process.Pid] = f.exe
	}
	untrusted := 0
	s := NewScanner(Options{Untrusted: func(n int) { untrusted = n }})
	for range 2 {
		if _, err := s.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	if untrusted < len(tenant) {
		t.Errorf("%d untrusted processes counted, want at least the tenant's %d", untrusted, len(tenant))
	}
	for pid, exe := range tenant {
		p := s.procs[pid]
		if p == nil {
			t.Errorf("the tenant's %s (pid %d) not remembered as untrusted", exe, pid)
			continue
		}
		identity := proc{start: p.start, hv: p.hv, inPod: p.inPod, inKube: p.inKube, exeErr: p.exeErr, cut: p.cut}
		if p.trusted || !reflect.DeepEqual(*p, identity) {
			kept := fmt.Sprintf("%+v", *p)
			t.Errorf("the tenant's %s (pid %d): kept %.300s (%d bytes printed), want its identity only", exe, pid, kept, len(kept))
		}
	}
}

// The trust check comes before any read of a process's command line: a
// process of another user than the trusted ones never has its cmdline
// opened, root's has (seen by inotify, on fixtures of /proc).
func TestCommandLineReadOnlyWhenTrusted(t *testing.T) {
	root := t.TempDir()
	fakeProcAs(t, root, 100, 1000, "/usr/bin/firecracker", []string{"firecracker", "--id", "user-vm"}, "0::/user.slice\n",
		map[int]string{100: "firecracker", 101: "fc_vcpu 0"})
	fakeProc(t, root, 200, "/usr/bin/firecracker", []string{"firecracker", "--id", "root-vm"}, "0::/\n",
		map[int]string{200: "firecracker", 201: "fc_vcpu 0"})
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	pidOf := map[int32]int{}
	for _, pid := range []int{100, 200} {
		wd, err := unix.InotifyAddWatch(fd, filepath.Join(root, strconv.Itoa(pid), "cmdline"), unix.IN_OPEN)
		if err != nil {
			t.Fatal(err)
		}
		pidOf[int32(wd)] = pid
	}
	vms, err := NewScanner(Options{ProcRoot: root}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Name != "root-vm" {
		t.Fatalf("found %+v, want root's VM root-vm only", vms)
	}
	opened := map[int]bool{}
	for _, wd := range inotifyEvents(t, fd) {
		opened[pidOf[wd]] = true
	}
	if opened[100] || !opened[200] {
		t.Errorf("command lines opened: %v; want root's process's (200) only", opened)
	}
}

// inotifyEvents reads the watch descriptors of the events waiting on
// the non-blocking inotify descriptor fd.
func inotifyEvents(t *testing.T, fd int) []int32 {
	t.Helper()
	var wds []int32
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return wds
		}
		if err != nil {
			t.Fatal(err)
		}
		// struct inotify_event: wd, mask, cookie, len, then len bytes of name.
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wds = append(wds, int32(binary.NativeEndian.Uint32(buf[off:])))
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
	}
}

// A trusted process's command line is read up to maxCmdline (the cut
// counted and logged once), and what is kept of it is bounded and
// copied: 20 root VMs with 6 MB command lines, their names in 128 KiB
// arguments, leave the heap as it was but for a few KB each.
func TestTrustedCommandLineBoundedAndCopied(t *testing.T) {
	needRoot(t)
	const perKind = 5
	discovertest.AllowLongCommandLines(t)
	lines := make([][]string, len(bigFakes))
	for i, f := range bigFakes {
		lines[i] = discovertest.LongCommandLine(47, f.args...)
	}
	cuts := map[string]int{}
	s := NewScanner(Options{Limited: func(l string) { cuts[l]++ }})
	if _, err := s.Scan(); err != nil {
		t.Fatal(err)
	}
	before := liveHeap()
	want := map[int]string{}
	for i, f := range bigFakes {
		exe := filepath.Join(t.TempDir(), f.exe)
		discovertest.Build(t, exe)
		for range perKind {
			cmd := discovertest.Start(t, exe, -1, f.threads, 2, lines[i]...)
			want[cmd.Process.Pid] = (f.prefix + strings.Repeat("x", MaxNameLen))[:MaxNameLen]
		}
	}
	for range 2 {
		vms, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, vm := range vms {
			if name, ok := want[vm.PID]; ok {
				found++
				if vm.Name != name {
					t.Fatalf("VM %d named %.40q..., want %.40q...", vm.PID, vm.Name, name)
				}
			}
		}
		if found != len(want) {
			t.Fatalf("%d of the %d VMs found", found, len(want))
		}
	}
	after := liveHeap()
	runtime.KeepAlive(s)
	t.Logf("live heap %d KB before the VMs, %d KB after", before>>10, after>>10)
	if after > before+4<<20 {
		t.Errorf("live heap grew by %d KB for %d VMs: their command lines are kept", (after-before)>>10, len(want))
	}
	if cuts[LimitCmdline] != len(want) {
		t.Errorf("%d command line cuts counted, want one for each of the %d VMs", cuts[LimitCmdline], len(want))
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A trusted process whose uids change to a user not trusted (QEMU's
// -runas to the wrong user) is dropped, and what was read of it while
// it was trusted goes with it.
func TestNoLongerTrustedForgotten(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 100, "/usr/bin/firecracker", []string{"firecracker", "--id", "vm"}, "0::/\n",
		map[int]string{100: "firecracker", 101: "fc_vcpu 0"})
	s := NewScanner(Options{ProcRoot: root})
	if vms, err := s.Scan(); err != nil || len(vms) != 1 || vms[0].Name != "vm" {
		t.Fatalf("root's VM: %+v (%v)", vms, err)
	}
	status := "Name:\tx\nUid:\t0\t1000\t1000\t1000\nGid:\t0\t0\t0\t0\nGroups:\t\n"
	if err := os.WriteFile(filepath.Join(root, "100", "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	if vms, err := s.Scan(); err != nil || len(vms) != 0 {
		t.Fatalf("after its uids changed to 1000: %+v (%v), want no VM", vms, err)
	}
	p := s.procs[100]
	if p == nil || !reflect.DeepEqual(*p, proc{start: p.start, hv: p.hv, exeErr: p.exeErr, cut: p.cut}) {
		t.Errorf("kept %+v, want the process's identity only", p)
	}
}

// A status file past its bound (a Groups line no process can have)
// gives no ids, so no trust; one within it gives them.
func TestStatusBounded(t *testing.T) {
	dir := t.TempDir()
	ids := "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n"
	for _, c := range []struct {
		groups int
		ok     bool
	}{{10, true}, {maxStatus / 2, false}} {
		status := ids + "Groups:\t" + strings.Repeat("4 ", c.groups) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := readIDs(dir)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, errTooLong)) {
			t.Errorf("status of %d bytes: %v; want ids: %v", len(status), err, c.ok)
		}
	}
}
