// Package libvirttest lets tests use the real libvirtd and QEMU on the
// machine: it connects (or skips the test with a reason), boots transient
// domains from the vmimages guest and destroys them in t.Cleanup, and can
// restart libvirtd. Start the daemon with .ci/setup-libvirt.sh.
package libvirttest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// Prefix starts the name of every domain tests create, so leftovers are
// easy to find (.ci/setup-libvirt.sh down destroys them).
const Prefix = "vgpu-probe-test-"

// Socket is the libvirtd socket tests use: $VGPU_LIBVIRT_SOCKET or the
// qemu:///system default.
func Socket() string {
	if s := os.Getenv("VGPU_LIBVIRT_SOCKET"); s != "" {
		return s
	}
	return "/run/libvirt/libvirt-sock"
}

const skipHint = "start it with .ci/setup-libvirt.sh (as root)"

// dial connects to the test libvirtd; it is the one place that decides
// what "reachable" means for tests.
func dial() (*lv.Libvirt, error) {
	l := lv.NewWithDialer(dialers.NewLocal(dialers.WithSocket(Socket()), dialers.WithLocalTimeout(5*time.Second)))
	done := make(chan error, 1)
	go func() { done <- l.ConnectToURI(lv.QEMUSystem) }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return l, nil
	case <-time.After(10 * time.Second):
		return nil, errors.New("no answer within 10s")
	}
}

// Explicit says the tests were asked for by name (make e2e sets
// VGPU_E2E=1): then a missing prerequisite is a failure, not a skip, so
// that the target cannot pass without testing anything.
func Explicit() bool { return os.Getenv("VGPU_E2E") == "1" }

// Unavailable skips the test for a missing prerequisite, or fails it,
// naming the prerequisite, where the test was asked for explicitly.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Explicit() {
		t.Fatalf("missing prerequisite (the test was asked for with VGPU_E2E=1): "+format, args...)
	}
	t.Skipf(format, args...)
}

// Connect returns a connection to libvirtd, closed in t.Cleanup. It skips
// the test when libvirtd is not reachable (fails it when asked for
// explicitly). It also holds the host-wide test lock until the test ends
// (see lock).
func Connect(t testing.TB) *lv.Libvirt {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "libvirt tests need root (qemu:///system); %s", skipHint)
	}
	lock(t)
	l, err := dial()
	if err != nil {
		Unavailable(t, "libvirtd not running at %s (%v): %s", Socket(), err, skipHint)
	}
	t.Cleanup(func() { l.Disconnect() })
	return l
}

// LockFile serialises libvirt tests across test processes: `go test ./...`
// runs packages in parallel, and a test that restarts libvirtd would break
// another package's test that is talking to it at that moment.
const LockFile = "/run/lock/vgpu-probe-libvirt-tests.lock"

// The flock is per process; tests of one process share it (they run one
// after the other unless they call t.Parallel).
var (
	lockMu    sync.Mutex
	lockFile  *os.File
	lockUsers int
)

func lock(t testing.TB) {
	t.Helper()
	lockMu.Lock()
	defer lockMu.Unlock()
	if lockUsers == 0 {
		if err := os.MkdirAll(filepath.Dir(LockFile), 0o755); err != nil {
			t.Fatalf("libvirt test lock: %v", err)
		}
		f, err := os.OpenFile(LockFile, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatalf("libvirt test lock: %v", err)
		}
		// Blocks while another test process holds it; go test's own
		// -timeout bounds the wait.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			t.Fatalf("libvirt test lock %s: %v", LockFile, err)
		}
		lockFile = f
	}
	lockUsers++
	t.Cleanup(unlock)
}

func unlock() {
	lockMu.Lock()
	defer lockMu.Unlock()
	lockUsers--
	if lockUsers == 0 {
		// Closing the file drops the flock.
		lockFile.Close()
		lockFile = nil
	}
}

// Image returns the built test guest, building it first if needed (that
// downloads the kernel package with apt, once).
func Image(t testing.TB) vmimages.Image {
	t.Helper()
	dir := vmimages.DefaultDir()
	img, err := vmimages.Find(dir)
	if errors.Is(err, vmimages.ErrNotBuilt) {
		t.Logf("building the vm image in %s", dir)
		if err := vmimages.Build(t.Context(), dir); err != nil {
			t.Fatalf("vm image: %v", err)
		}
		img, err = vmimages.Find(dir)
	}
	if err != nil {
		t.Fatalf("vm image: %v", err)
	}
	return img
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Name returns a fresh domain name for t: Prefix, a short form of the test
// name and random hex (tests run in parallel across packages).
func Name(t testing.TB) string {
	base := strings.ToLower(unsafeChars.ReplaceAllString(t.Name(), "-"))
	if len(base) > 30 {
		base = base[:30]
	}
	var b [4]byte
	rand.Read(b[:])
	return Prefix + strings.Trim(base, "-") + "-" + hex.EncodeToString(b[:])
}

// Domain is a transient test domain that StartDomain booted.
type Domain struct {
	lv.Domain
	// SerialLog receives the guest console.
	SerialLog string
}

// StartDomain boots spec as a transient domain and destroys it in
// t.Cleanup (through a connection of its own, so a test that restarts
// libvirtd still cleans up). Empty Name, Image and SerialLog are filled in.
func StartDomain(t testing.TB, l *lv.Libvirt, spec vmimages.Domain) Domain {
	t.Helper()
	if spec.Name == "" {
		spec.Name = Name(t)
	}
	if !strings.HasPrefix(spec.Name, Prefix) {
		t.Fatalf("test domain %q must be named %s*", spec.Name, Prefix)
	}
	if spec.Image == (vmimages.Image{}) {
		spec.Image = Image(t)
	}
	if spec.SerialLog == "" {
		spec.SerialLog = filepath.Join(t.TempDir(), "serial.log")
	}
	x, err := vmimages.Render(spec)
	if err != nil {
		t.Fatalf("render domain: %v", err)
	}
	dom, err := l.DomainCreateXML(x, 0)
	if err != nil {
		t.Fatalf("create domain %s: %v", spec.Name, err)
	}
	name := spec.Name
	shm := ""
	if spec.Shmem != nil {
		shm = filepath.Join("/dev/shm", spec.Shmem.Name)
	}
	t.Cleanup(func() {
		if err := Destroy(name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		// QEMU creates the ivshmem backing file and libvirt leaves it.
		if shm != "" {
			os.Remove(shm)
		}
	})
	return Domain{Domain: dom, SerialLog: spec.SerialLog}
}

// Destroy destroys a domain by name if it still runs.
func Destroy(name string) error {
	l, err := dial()
	for try := 1; err != nil && try < 3; try++ {
		// libvirtd answers a new connection late or drops it now and
		// then while it tears down another domain: a cleanup tries
		// again rather than leave the domain running.
		time.Sleep(time.Second)
		l, err = dial()
	}
	if err != nil {
		return fmt.Errorf("destroy %s: connect: %w", name, err)
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		if isNoDomain(err) {
			return nil
		}
		return fmt.Errorf("destroy %s: lookup: %w", name, err)
	}
	if err := l.DomainDestroy(dom); err != nil && !isNoDomain(err) {
		return fmt.Errorf("destroy %s: %w", name, err)
	}
	return nil
}

func isNoDomain(err error) bool {
	var e lv.Error
	if errors.As(err, &e) {
		return e.Code == uint32(lv.ErrNoDomain) || e.Code == uint32(lv.ErrOperationInvalid)
	}
	return false
}

// WaitSerial waits until the guest console log contains substr.
func WaitSerial(t testing.TB, path, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), substr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("guest console %s: no %q after %s; it has:\n%s", path, substr, timeout, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// QEMUPid returns the pid of a running domain's QEMU process, from the pid
// file libvirt keeps.
func QEMUPid(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", name+".pid"))
	if err != nil {
		return 0, fmt.Errorf("qemu pid of %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("qemu pid of %s: %w", name, err)
	}
	return pid, nil
}

const libvirtdPidFile = "/run/libvirtd.pid"

// StopLibvirtd stops the running libvirtd (started by .ci/setup-libvirt.sh,
// without systemd) and waits until it has exited. Running domains keep
// running: QEMU is not libvirtd's child in that sense. Skips under systemd,
// where the daemon is not ours to kill.
func StopLibvirtd(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("libvirtd is managed by systemd here; restart tests run only without systemd (CI)")
	}
	if Socket() != "/run/libvirt/libvirt-sock" {
		t.Skipf("restart tests restart the system libvirtd, not the one at $VGPU_LIBVIRT_SOCKET=%s", Socket())
	}
	b, err := os.ReadFile(libvirtdPidFile)
	if err != nil {
		t.Fatalf("stop libvirtd: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("stop libvirtd: pid file %s: %v", libvirtdPidFile, err)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "libvirtd" {
		t.Fatalf("stop libvirtd: pid %d from %s is %q, not libvirtd", pid, libvirtdPidFile, strings.TrimSpace(string(comm)))
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatalf("stop libvirtd: %v", err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop libvirtd: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stop libvirtd: pid %d still alive after 30s", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The socket file stays behind; make sure nothing answers on it.
	if c, err := net.DialTimeout("unix", Socket(), time.Second); err == nil {
		c.Close()
		t.Fatalf("stop libvirtd: something still answers on %s", Socket())
	}
}

// StartLibvirtd starts libvirtd as .ci/setup-libvirt.sh does and waits
// until it answers.
func StartLibvirtd(t testing.TB) {
	t.Helper()
	out, err := exec.Command("libvirtd", "-d").CombinedOutput()
	if err != nil {
		t.Fatalf("start libvirtd: %v: %s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := dial()
		if err == nil {
			l.Disconnect()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("start libvirtd: no answer on %s after 60s: %v", Socket(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
