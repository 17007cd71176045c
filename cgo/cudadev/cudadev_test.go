package cudadev

import (
	"os"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/experiments/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// Without a GPU the device must refuse with a clear error, not crash (the
// driver is loaded once per process, so this is the only Open here).
func TestOpenWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("a GPU driver is present; experiments/device/run.sh covers this machine")
	}
	t.Setenv("HYBRIDSYNC_CUDA_LIB", "/nonexistent/libcuda.so.1")
	_, _, _, err := Open(hybridsync.ModeHybrid)
	if err == nil || !strings.Contains(err.Error(), "cannot load the CUDA driver /nonexistent/libcuda.so.1") {
		t.Fatalf("Open: %v", err)
	}
}

func TestRegistered(t *testing.T) {
	for _, d := range workload.Devices() {
		if d == "cuda" {
			return
		}
	}
	t.Fatalf("cuda not among %v", workload.Devices())
}
