package hybridsync_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// TestConfigFromEnvHints: HYBRIDSYNC_HINTS names the page that answers both
// the remaining slice and the contention; a page that does not exist yet
// is a notice for the log, not an error, and the defaults stand in for it.
func TestConfigFromEnvHints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-page-yet")
	env := map[string]string{hybridsync.EnvHints: path}
	c, err := hybridsync.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	hs, ok := c.Threshold.(*hybridsync.HintSource)
	if !ok || c.Contention != hs {
		t.Fatalf("threshold %T, contention %T: want the hint source for both", c.Threshold, c.Contention)
	}
	if !strings.Contains(c.Notice, hybridsync.EnvHints) {
		t.Errorf("notice %q: want it to name %s", c.Notice, hybridsync.EnvHints)
	}
	// Without a page, waits still work and count as fallbacks.
	if got := hs.Contention(1, hybridsync.Now()); got != hybridsync.ContentionUnknown && got != hybridsync.ContentionFree &&
		got != hybridsync.ContentionShared && got != hybridsync.ContentionThrottled {
		t.Errorf("contention %v", got)
	}
	s := hybridsync.New(c.Config)
	if st := s.Stats(nil); st.Hints == nil {
		t.Error("stats: no hints section with HYBRIDSYNC_HINTS set")
	}

	c, err = hybridsync.ConfigFromEnv(func(string) string { return "" })
	if err != nil || c.Threshold != nil || c.Contention != nil || c.Notice != "" {
		t.Errorf("unset: threshold %v contention %v notice %q err %v", c.Threshold, c.Contention, c.Notice, err)
	}
}
