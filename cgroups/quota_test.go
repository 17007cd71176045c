package cgroups

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestQuota(t *testing.T) {
	for _, c := range []struct {
		name          string
		files         map[string]string
		quota, period time.Duration
	}{
		{"v2 limit", map[string]string{"cpu.max": "50000 100000\n"}, 50 * time.Millisecond, 100 * time.Millisecond},
		{"v2 none", map[string]string{"cpu.max": "max 100000\n"}, 0, 0},
		{"v2 garbage", map[string]string{"cpu.max": "50000\n"}, 0, 0},
		// cpu.max wins over v1 files (a v2 kernel has no cfs files anyway).
		{"v2 first", map[string]string{"cpu.max": "max 100000\n", "cpu.cfs_quota_us": "1000\n", "cpu.cfs_period_us": "2000\n"}, 0, 0},
		{"v1 limit", map[string]string{"cpu.cfs_quota_us": "25000\n", "cpu.cfs_period_us": "100000\n"}, 25 * time.Millisecond, 100 * time.Millisecond},
		{"v1 none", map[string]string{"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n"}, 0, 0},
		{"v1 no period", map[string]string{"cpu.cfs_quota_us": "25000\n"}, 0, 0},
		{"v1 zero period", map[string]string{"cpu.cfs_quota_us": "25000\n", "cpu.cfs_period_us": "0\n"}, 0, 0},
		{"no cpu controller", map[string]string{"cgroup.procs": "1\n"}, 0, 0},
	} {
		dir := t.TempDir()
		for name, body := range c.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if q, p := Quota(dir); q != c.quota || p != c.period {
			t.Errorf("%s: Quota = %v per %v, want %v per %v", c.name, q, p, c.quota, c.period)
		}
	}
	if q, p := Quota(filepath.Join(t.TempDir(), "gone")); q != 0 || p != 0 {
		t.Errorf("missing directory: %v per %v", q, p)
	}
}
