package daemon

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// A page QEMU made itself (started without `agent hints-args`, so QEMU
// created the file under its umask, 0644) may already be open in a
// tenant's hands: the tenant (nobody) opens it before the agent runs,
// and with the descriptor kept reads what the agent put there. The agent
// must write nothing into such a file: the tenant reads no page header
// through the descriptor it opened early.
func TestAgentRefusesPageQEMUMade(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	dir := t.TempDir()
	// The tenant reaches the page by its name, as in the agent's own
	// directory (0711).
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	const vm = "early-open"
	page := filepath.Join(dir, hintpage.FileName(vm))
	discovertest.QEMU(t, append([]string{"-name", "guest=" + vm + ",debug-threads=on"}, hintpage.QEMUArgs(dir, vm)...)...)
	var st syscall.Stat_t
	for deadline := time.Now().Add(time.Minute); syscall.Stat(page, &st) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("QEMU made no page file")
		}
	}
	if st.Mode&0o004 == 0 {
		t.Skipf("QEMU made its file %#o under this umask: no window to test", st.Mode&0o777)
	}

	// The tenant opens it now and reads from that descriptor once told.
	tenant := exec.Command("sh", "-c", `exec 3<"$1" || exit 3; echo opened; read go; head -c 4 <&3 | od -An -tx1`, "sh", page)
	tenant.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: discovertest.Tenant, Gid: discovertest.Tenant}}
	tenant.Dir = "/"
	stdin, _ := tenant.StdinPipe()
	stdout, _ := tenant.StdoutPipe()
	if err := tenant.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tenant.Process.Kill(); tenant.Wait() })
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "opened\n" {
		t.Fatalf("the tenant could not open QEMU's 0644 file: %q %v", line, err)
	}

	_, err := once(t, &Config{Discover: true, Hints: dir, StateDir: t.TempDir()}, 4*time.Second)
	if errors.Is(err, bpfload.ErrPermission) {
		t.Skipf("kernel does not let root load BPF: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	got, _ := io.ReadAll(out)
	// The magic, little-endian: 0x50484756, "VGHP".
	if strings.Contains(string(got), "56 47 48 50") {
		t.Errorf("the tenant read the agent's page through a descriptor opened before the agent ran: %q", got)
	}
}

// `agent --hints` on a directory every user may write (like /dev/shm)
// is refused at start with one line, and a tenant's file named like a
// page there is left alone (the agent used to remove it as stale).
func TestAgentLeavesTenantsFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent runs as root")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(dir, hintpage.FileName("real9"))
	if err := os.WriteFile(planted, make([]byte, 4096), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, discovertest.Tenant, discovertest.Tenant); err != nil {
		t.Fatal(err)
	}
	_, err := once(t, &Config{PIDs: []int{os.Getpid()}, Hints: dir, StateDir: t.TempDir()}, time.Second)
	if !errors.Is(err, ErrRequest) || strings.Contains(err.Error(), "\n") {
		t.Errorf("--hints %s (mode 1777): %v, want a one-line refusal", dir, err)
	}
	if _, err := os.Stat(planted); err != nil {
		t.Errorf("the tenant's file: %v, want it left alone", err)
	}
}
