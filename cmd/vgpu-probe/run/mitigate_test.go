package run

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/results"
)

func TestMitigateBadValue(t *testing.T) {
	for _, v := range []string{"100us", "slice=1s", "slice=50us", "slice=1m", "quantum=100us"} {
		o, err := parse(t, "--mitigate", v, "--out", filepath.Join(t.TempDir(), "out"))
		if o != nil || !errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--mitigate %s: ran %v, error %v; want a one-line usage error", v, o != nil, err)
		}
	}
}

// TestMitigateLocal: on the local backend the runner's process (here a
// workload command, which reads its own slice from /proc) has the slice,
// and results.json records the setting.
func TestMitigateLocal(t *testing.T) {
	const slice = 100 * time.Microsecond
	if _, err := mitigate.Check(mitigate.System, uint64(slice)); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	dir := t.TempDir()
	seen := filepath.Join(dir, "slice")
	out := filepath.Join(dir, "out")
	runWith(t, nil, "--mitigate", "slice=100us", "--out", out,
		"--workload-cmd", "grep se.slice /proc/self/sched > "+seen)
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(b)); len(f) != 3 || f[2] != "100000" {
		t.Errorf("the runner's slice: %q, want se.slice 100000 (ns)", b)
	}
	f, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Config.Mitigate != "slice=100us" {
		t.Errorf("results.json config mitigate %q, want slice=100us", f.Config.Mitigate)
	}
}
