package suite

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestUserLoopHostWork runs experiments/apps/test_userloop.py: the host
// work of the suite's user-loop programs (torch_infer_host.py,
// torch_train_dataprep.py, torch_two_threads.py), its calibration and
// their preparer thread, which need python3 with NumPy and not torch or a
// GPU.
func TestUserLoopHostWork(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: experiments/apps/test_userloop.py not run (CI installs python3 and python3-numpy)")
	}
	if out, err := exec.Command(python, "-c", "import numpy").CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Skipf("%s has no NumPy (%s): experiments/apps/test_userloop.py not run (CI installs python3-numpy)", python, lines[len(lines)-1])
	}
	cmd := exec.Command(python, "-m", "unittest", "test_userloop")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 -m unittest test_userloop: %v\n%s", err, out)
	}
}
