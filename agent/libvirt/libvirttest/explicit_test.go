package libvirttest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Asked for explicitly (VGPU_E2E=1, as make e2e does), a test whose
// libvirtd is missing must fail and name it; otherwise it skips.
func TestUnreachableLibvirtd(t *testing.T) {
	if os.Getenv("LIBVIRTTEST_CHILD") == "1" {
		Connect(t)
		return
	}
	for _, c := range []struct {
		e2e      string
		wantFail bool
	}{{"1", true}, {"", false}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUnreachableLibvirtd$", "-test.v")
		cmd.Env = append(os.Environ(), "LIBVIRTTEST_CHILD=1", "VGPU_E2E="+c.e2e,
			"VGPU_LIBVIRT_SOCKET="+t.TempDir()+"/no-libvirtd.sock")
		out, err := cmd.CombinedOutput()
		failed := err != nil
		if failed != c.wantFail {
			t.Errorf("VGPU_E2E=%q: failed=%v, want %v:\n%s", c.e2e, failed, c.wantFail, out)
		}
		if c.wantFail && !strings.Contains(string(out), "missing prerequisite") {
			t.Errorf("VGPU_E2E=1: the failure does not name the missing prerequisite:\n%s", out)
		}
		if !c.wantFail && !strings.Contains(string(out), "--- SKIP") {
			t.Errorf("without VGPU_E2E: not skipped:\n%s", out)
		}
	}
}
