// Package discovertest starts real VM processes for tests of discovery:
// QEMU itself (TCG, paused, without libvirt) and stand-ins for the
// hypervisors the test machines do not have, a small C program named
// like the hypervisor whose threads carry its vCPU thread names and whose
// command line carries its identity flags. Each is killed in t.Cleanup.
package discovertest

import (
	"bufio"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
)

//go:embed testdata/standin.c
var standinSource []byte

//go:embed testdata/swap.c
var swapSource []byte

// Build compiles the stand-in to path, for Start.
func Build(t testing.TB, path string) { build(t, path) }

// build compiles the stand-in to path.
func build(t testing.TB, path string) {
	t.Helper()
	buildC(t, "standin.c", standinSource, path)
}

// buildC compiles the C program source (called name) to path.
func buildC(t testing.TB, name string, source []byte, path string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		libvirttest.Unavailable(t, "the test's %s is built with gcc: %v", name, err)
	}
	src := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(src, source, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("gcc", "-O1", "-pthread", "-o", path, src).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v: %s", name, err, b)
	}
}

// StandIn starts the stand-in as an executable called exe (so that
// /proc/PID/exe names it), with threadFmt naming n threads (e.g.
// "fc_vcpu %d") and args as its command line after the program.
func StandIn(t testing.TB, exe, threadFmt string, n int, args ...string) *exec.Cmd {
	t.Helper()
	path := filepath.Join(t.TempDir(), exe)
	build(t, path)
	return Start(t, path, -1, threadFmt, n, args...)
}

// BusyStandIn is StandIn whose threads spin, as a running guest's vCPUs
// do, instead of sleeping.
func BusyStandIn(t testing.TB, exe, threadFmt string, n int, args ...string) *exec.Cmd {
	t.Helper()
	path := filepath.Join(t.TempDir(), exe)
	build(t, path)
	return start(t, path, -1, []string{"STANDIN_BUSY=1"}, threadFmt, n, args...)
}

// Tenant is the user tests run hostile processes as: nobody, a user the
// agent must not trust.
const Tenant = 65534

// TenantStandIn builds the stand-in as exe in a directory of uid's own,
// as an unprivileged user would make a fake hypervisor, and returns its
// path.
func TenantStandIn(t testing.TB, uid int, exe string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tenant-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, exe)
	build(t, path)
	for _, p := range []string{dir, path} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// Swapper starts, as uid, a process that exchanges the names a and b
// (renameat2 RENAME_EXCHANGE) as fast as it can until the test ends: a
// user who may rename them, racing a check of a path through one of
// them. It returns once the first exchange is done.
func Swapper(t testing.TB, uid int, a, b string) *exec.Cmd {
	t.Helper()
	dir, err := os.MkdirTemp("", "swapper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // uid runs it from here
		t.Fatal(err)
	}
	path := filepath.Join(dir, "swap")
	buildC(t, "swap.c", swapSource, path)
	return start(t, path, uid, nil, "", 0, a, b)
}

// Start runs the stand-in at path as uid (-1: as the test), with
// threadFmt naming n threads and args after the program, and waits for
// its threads.
func Start(t testing.TB, path string, uid int, threadFmt string, n int, args ...string) *exec.Cmd {
	t.Helper()
	return start(t, path, uid, nil, threadFmt, n, args...)
}

// start is Start with env added to the stand-in's environment.
func start(t testing.TB, path string, uid int, env []string, threadFmt string, n int, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "STANDIN_THREAD="+threadFmt, "STANDIN_N="+strconv.Itoa(n))
	cmd.Env = append(cmd.Env, env...)
	runAs(cmd, uid)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("stand-in %s did not start its threads", path)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("stand-in %s: no ready line in 10s", path)
	}
	return cmd
}

// runAs makes cmd run as uid (and its gid) with no supplementary groups;
// -1 leaves it the test's.
func runAs(cmd *exec.Cmd, uid int) {
	if uid < 0 {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	cmd.Dir = "/"
}

// QEMU starts qemu-system-x86_64 under TCG, paused (-S: its vCPU threads
// exist, the guest does not run), with no devices and args added. It
// skips the test when QEMU is not installed (fails it under VGPU_E2E=1).
func QEMU(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return QEMUAs(t, -1, args...)
}

// QEMUAs is QEMU run as uid (-1: as the test).
func QEMUAs(t testing.TB, uid int, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		libvirttest.Unavailable(t, "qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
	}
	base := []string{"-accel", "tcg", "-S", "-nodefaults", "-display", "none", "-m", "64", "-serial", "none", "-monitor", "none"}
	cmd := exec.Command(bin, append(base, args...)...)
	runAs(cmd, uid)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	select {
	case <-exited:
		t.Fatalf("qemu exited at once: %s", stderr.String())
	case <-time.After(200 * time.Millisecond):
	}
	return cmd
}

// MaxArg is the longest argument exec takes (the kernel's
// MAX_ARG_STRLEN, 128 KiB with its NUL).
const MaxArg = 128<<10 - 1

// LongArg is prefix, then 'x' up to MaxArg bytes, then suffix: an
// argument of the largest size exec takes.
func LongArg(prefix, suffix string) string {
	return prefix + strings.Repeat("x", MaxArg-len(prefix)-len(suffix)) + suffix
}

// LongCommandLine is args followed by MaxArg-byte fillers up to n
// arguments in all: with n = 47, a 6 MB command line, which exec takes
// only with AllowLongCommandLines.
func LongCommandLine(n int, args ...string) []string {
	out, fill := slices.Clone(args), LongArg("--fill=", "")
	for len(out) < n {
		out = append(out, fill)
	}
	return out
}

// AllowLongCommandLines raises this process's stack limit, which its
// children inherit, to where exec takes the kernel's most for arguments
// and environment (6 MiB, and a quarter of the stack limit: 8 MiB allows
// 2 MiB); it is put back in t.Cleanup.
func AllowLongCommandLines(t testing.TB) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &old); err != nil {
		t.Fatal(err)
	}
	raised := old
	if raised.Cur != unix.RLIM_INFINITY && raised.Cur < 32<<20 {
		raised.Cur = 32 << 20
	}
	if raised.Max != unix.RLIM_INFINITY && raised.Max < raised.Cur {
		raised.Max = raised.Cur // root may raise the hard limit
	}
	if err := unix.Setrlimit(unix.RLIMIT_STACK, &raised); err != nil {
		t.Fatalf("raising the stack limit for long command lines: %v", err)
	}
	t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_STACK, &old) })
}
