package daemon

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/internal/tmpfstest"
)

// Hint pages stay with their VM: a real QEMU started with the arguments
// `agent hints-args` prints keeps a live page in its own mapping across
// agent restarts (SIGTERM, then SIGKILL), the same inode throughout; a
// stale page nobody uses is removed at start; a page another process
// maps survives every start and stop. Read through QEMU's own memory
// (/proc/PID/mem at the mapping of the page's inode), not by path.
func TestPagesStayWithQEMU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		discovertest.QEMU(t) // skips, or fails under VGPU_E2E=1
	}
	bin := buildAgent(t)
	dir := filepath.Join(tmpfstest.Mount(t, 64<<20), `hints a'b "c`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const vm = "pages-vm"
	path := filepath.Join(dir, hintpage.FileName(vm))

	// Left by an earlier agent, mapped by nobody: removed at start.
	gone := filepath.Join(dir, hintpage.FileName("gone"))
	if err := os.WriteFile(gone, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	// Mapped by a live process (this one; the agent is another): kept.
	held := filepath.Join(dir, hintpage.FileName("held"))
	if err := os.WriteFile(held, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	hf, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	hm, err := unix.Mmap(int(hf.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(hm)

	qemu := discovertest.QEMU(t, append([]string{"-name", "guest=" + vm + ",debug-threads=on", "-smp", "2"}, hintsArgs(t, bin, dir, "root", vm)...)...)
	q := &qemuPage{t: t, pid: qemu.Process.Pid, path: path}
	q.find() // hints-args made the file, QEMU mapped it

	a := startPagesAgent(t, bin, dir)
	beat := q.waitBeat(a, 0)
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("stale page nobody maps still there after the start: %v", err)
	}

	a.stop(t)
	q.same("after SIGTERM")
	last := q.beat()
	time.Sleep(300 * time.Millisecond)
	if b := q.beat(); b != last {
		t.Fatalf("page written after the agent stopped: %d, then %d", last, b)
	}
	if last < beat {
		t.Fatalf("heartbeat went back: %d after %d", last, beat)
	}

	a = startPagesAgent(t, bin, dir)
	q.waitBeat(a, last)
	q.same("after a restart")

	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	last = q.beat()
	q.same("after SIGKILL")
	a = startPagesAgent(t, bin, dir)
	q.waitBeat(a, last)
	q.same("after a restart that followed SIGKILL")

	// QEMU goes: its page is no one's, and the agent removes it.
	qemu.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page of a VM that exited is still there:\n%s", a.stderr.String())
		}
	}
	a.stop(t)
	if _, err := os.Stat(held); err != nil {
		t.Errorf("a page another process maps was removed: %v", err)
	}
}

// The agent as the unit runs it (no CAP_SYS_PTRACE: the maps of a root
// QEMU with every capability are closed to it; no CAP_LEASE) keeps the
// pages that QEMUs map, root's and another user's (trusted with
// --trust-users, so that the agent publishes into it and gives it to
// that user), across its start and stop, and removes a stale page.
func TestPagesUnitCapabilities(t *testing.T) {
	needsRootAndSetpriv(t)
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		discovertest.QEMU(t)
	}
	caps := unitCaps(t)
	agent := buildAgent(t)
	dir := tmpfstest.Mount(t, 64<<20, "mode=0711") // as the agent makes its own
	// Nobody's QEMU must reach it through the test's directories.
	for d := filepath.Dir(dir); d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	gone := filepath.Join(dir, hintpage.FileName("gone"))
	if err := os.WriteFile(gone, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(gone, nobody, nobody); err != nil {
		t.Fatal(err)
	}

	rootQEMU := discovertest.QEMU(t, append([]string{"-name", "guest=pages-root,debug-threads=on"}, hintsArgs(t, agent, dir, "root", "pages-root")...)...)
	args := append([]string{fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups", bin,
		"-accel", "tcg", "-S", "-nodefaults", "-display", "none", "-m", "64", "-serial", "none", "-monitor", "none",
		"-name", "guest=pages-nobody,debug-threads=on"}, hintsArgs(t, agent, dir, strconv.Itoa(nobody), "pages-nobody")...)
	nobodyQEMU := exec.Command("setpriv", args...)
	var qerr strings.Builder
	nobodyQEMU.Stderr = &qerr
	if err := nobodyQEMU.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nobodyQEMU.Process.Kill(); nobodyQEMU.Wait() })
	pages := []*qemuPage{
		{t: t, pid: rootQEMU.Process.Pid, path: filepath.Join(dir, hintpage.FileName("pages-root"))},
		{t: t, pid: nobodyQEMU.Process.Pid, path: filepath.Join(dir, hintpage.FileName("pages-nobody"))},
	}
	for _, q := range pages {
		for deadline := time.Now().Add(10 * time.Second); !q.try(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("QEMU never mapped %s: %s", q.path, qerr.String())
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := asUnit(ctx, agent, caps, "--discover", "--trust-users", fmt.Sprintf("root,%d", nobody), "--hints", dir, "--once", "4s", "--json")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("agent under %v: %v\n%s", caps, err, stderr.String())
	}
	t.Logf("agent:\n%s", stderr.String())
	for _, q := range pages {
		q.same("after the agent under the unit's capabilities")
		if q.beat() == 0 {
			t.Errorf("%s: QEMU's memory holds no page the agent wrote", q.path)
		}
	}
	for i, owner := range []uint32{0, nobody} {
		var st syscall.Stat_t
		if err := syscall.Stat(pages[i].path, &st); err != nil || st.Uid != owner || st.Mode&0o777 != 0o600 {
			t.Errorf("%s: %v, owner %d mode %o, want %d and 0600", pages[i].path, err, st.Uid, st.Mode&0o777, owner)
		}
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("stale page nobody maps still there: %v", err)
	}
}

// hintsArgs runs `vgpu-probe agent hints-args --dir dir --owner owner
// vm`, which makes the page (owned by owner, QEMU's user), and reads its
// line back as a shell would (eval), checking it is hintpage's.
func hintsArgs(t *testing.T, bin, dir, owner, vm string) []string {
	t.Helper()
	line, err := exec.Command(bin, "agent", "hints-args", "--dir", dir, "--owner", owner, vm).Output()
	if err != nil {
		t.Fatalf("hints-args: %v", err)
	}
	out, err := exec.Command("sh", "-c", `eval "set -- $1"; printf '%s\0' "$@"`, "sh", strings.TrimSpace(string(line))).Output()
	if err != nil {
		t.Fatalf("sh reading %q: %v", line, err)
	}
	args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if want := hintpage.QEMUArgs(dir, vm); strings.Join(args, "\n") != strings.Join(want, "\n") {
		t.Fatalf("hints-args printed %q, read back as %q, want %q", line, args, want)
	}
	return args
}

// startPagesAgent runs `vgpu-probe agent --discover --hints dir`.
func startPagesAgent(t *testing.T, bin, dir string) *agentProc {
	t.Helper()
	a := &agentProc{cmd: exec.Command(bin, "agent", "--discover", "--hints", dir, "--listen", "127.0.0.1:0"),
		stderr: &lockedBuffer{}, exited: make(chan struct{})}
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() { a.cmd.Process.Kill(); <-a.exited })
	return a
}

// qemuPage reads the page through QEMU's own mapping of it.
type qemuPage struct {
	t        *testing.T
	pid      int
	path     string
	dev, ino uint64 // of the file QEMU mapped first
	addr     uint64
}

// try finds QEMU's mapping of the file at path (by its dev and inode);
// false while there is none.
func (q *qemuPage) try() bool {
	var st syscall.Stat_t
	if err := syscall.Stat(q.path, &st); err != nil {
		return false
	}
	addr, ok := q.mapping(uint64(st.Dev), st.Ino)
	if ok {
		q.dev, q.ino, q.addr = uint64(st.Dev), st.Ino, addr
	}
	return ok
}

// find waits up to 10 s for QEMU to map the page: it may still be setting
// up its devices when its threads are there (a loaded CI machine saw it).
func (q *qemuPage) find() {
	q.t.Helper()
	for end := time.Now().Add(10 * time.Second); !q.try(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			q.t.Fatalf("QEMU %d maps no %s", q.pid, q.path)
		}
	}
}

// mapping returns the address of QEMU's mapping of dev:ino.
func (q *qemuPage) mapping(dev, ino uint64) (uint64, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", q.pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x %d", unix.Major(dev), unix.Minor(dev), ino)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 8192), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 || fs[3]+" "+fs[4] != want {
			continue
		}
		start, _, _ := strings.Cut(fs[0], "-")
		a, err := strconv.ParseUint(start, 16, 64)
		return a, err == nil
	}
	return 0, false
}

// same checks that QEMU still maps the inode it mapped first and that
// the path still names it.
func (q *qemuPage) same(when string) {
	q.t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(q.path, &st); err != nil {
		q.t.Fatalf("%s: the page file: %v", when, err)
	}
	if uint64(st.Dev) != q.dev || st.Ino != q.ino {
		q.t.Fatalf("%s: the path names inode %d, QEMU maps %d", when, st.Ino, q.ino)
	}
	if addr, ok := q.mapping(q.dev, q.ino); !ok || addr != q.addr {
		q.t.Fatalf("%s: QEMU no longer maps inode %d at %#x", when, q.ino, q.addr)
	}
}

// read returns the page as QEMU's memory holds it.
func (q *qemuPage) read() []byte {
	q.t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", q.pid))
	if err != nil {
		q.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, hintpage.PageAlign)
	if _, err := f.ReadAt(b, int64(q.addr)); err != nil {
		q.t.Fatalf("reading QEMU's memory at %#x: %v", q.addr, err)
	}
	return b
}

// beat is the page's heartbeat in QEMU's memory (0: no page).
func (q *qemuPage) beat() uint64 {
	q.t.Helper()
	pg, err := hintpage.Parse(q.read())
	if err != nil {
		return 0
	}
	return pg.Heartbeat()
}

// waitBeat waits until QEMU's memory holds a vCPU page of two slots or
// more whose heartbeat is past after, and returns it.
func (q *qemuPage) waitBeat(a *agentProc, after uint64) uint64 {
	q.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if pg, err := hintpage.Parse(q.read()); err == nil {
			if h := pg.Header(); h.Flags&hintpage.FlagVCPU != 0 && h.Slots >= 2 && pg.Heartbeat() > after {
				return pg.Heartbeat()
			}
		}
		select {
		case <-a.exited:
			q.t.Fatalf("agent exited (%v):\n%s", a.cmd.ProcessState, a.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			_, qerr := hintpage.Parse(q.read())
			q.t.Fatalf("QEMU's memory never held a live vCPU page past heartbeat %d (it holds: %v, heartbeat %d):\n%s", after, qerr, q.beat(), a.stderr.String())
		}
	}
}
