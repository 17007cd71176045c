package cudadev

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
)

// Without a GPU the device must refuse with a clear error, not crash (the
// driver is loaded once per process, so this is the only Open here).
func TestOpenWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("a GPU driver is present; experiments/paper/device/run.sh covers this machine")
	}
	t.Setenv("HYBRIDSYNC_CUDA_LIB", "/nonexistent/libcuda.so.1")
	_, _, _, err := Open(hybridsync.ModeHybrid)
	if err == nil || !strings.Contains(err.Error(), "cannot load the CUDA driver /nonexistent/libcuda.so.1") {
		t.Fatalf("Open: %v", err)
	}
}

// A cell's statistics land where HYBRIDSYNC_STATS says, one file per
// process, in the library's format; unset, nothing is written.
func TestStatsWriter(t *testing.T) {
	s := hybridsync.New(hybridsync.Config{Mode: hybridsync.ModeBlock})
	dev := simdev.New(1)
	for range 3 {
		if err := s.Sync(dev.Launch(0, 100*time.Microsecond), 5); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	statsWriter(s, filepath.Join(dir, "stats-%p.json"))()
	b, err := os.ReadFile(filepath.Join(dir, "stats-"+strconv.Itoa(os.Getpid())+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var st hybridsync.Stats
	if err := json.Unmarshal(b, &st); err != nil || st.Calls != 3 || st.Mode != hybridsync.ModeBlock.String() || len(st.Kernels) != 1 {
		t.Fatalf("stats %s: %+v %v", b, st, err)
	}
	statsWriter(s, "")()
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d files, want the one", len(ents))
	}
}
