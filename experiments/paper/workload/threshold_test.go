package workload

import (
	"path/filepath"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// SimConfigFor builds what a cell child would from its environment, with
// the threshold's settings over the process's own.
func TestSimConfigFor(t *testing.T) {
	t.Setenv(hybridsync.EnvMaxSpin, "50")
	page := filepath.Join(t.TempDir(), "none")
	c, err := SimConfigFor(hybridsync.ModeHybrid, ThresholdHints, page)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Threshold.(*signal.HintSource); !ok || c.MaxSpin != 0 {
		t.Errorf("hints: threshold %T, max spin %d; want the page, no cap from the environment", c.Threshold, c.MaxSpin)
	}
	if c, err = SimConfigFor(hybridsync.ModeHybrid, ThresholdGuest, ""); err != nil || c.Threshold != nil || c.MaxSpin != 0 {
		t.Errorf("guest: %+v, %v; want the default estimate", c, err)
	}
	if c, err = SimConfigFor(hybridsync.ModeHybrid, "", ""); err != nil || c.MaxSpin != 50_000 {
		t.Errorf("unset: %+v, %v; want the environment's 50 µs", c, err)
	}
	if _, err := SimConfigFor(hybridsync.ModeHybrid, ThresholdHints, ""); err == nil {
		t.Error("hints without a page: no error")
	}
}
