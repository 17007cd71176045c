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
	// Without a page, the source falls back and says so in the stats.
	hs.Contention(1, hybridsync.Now())
	s := hybridsync.New(c.Config)
	st := s.Stats(nil)
	if st.Hints == nil {
		t.Fatal("stats: no hints section with HYBRIDSYNC_HINTS set")
	}
	var fell uint64
	for _, n := range st.Hints.Fallbacks {
		fell += n
	}
	if st.Hints.Used != 0 || fell == 0 {
		t.Errorf("stats: hints %+v, want fallbacks and no use of a missing page", st.Hints)
	}

	c, err = hybridsync.ConfigFromEnv(func(string) string { return "" })
	if err != nil || c.Threshold != nil || c.Contention != nil || c.Notice != "" {
		t.Errorf("unset: threshold %v contention %v notice %q err %v", c.Threshold, c.Contention, c.Notice, err)
	}
}
