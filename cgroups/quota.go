// Package cgroups reads which cgroups a process is in (/proc/PID/cgroup,
// v1 and v2) and a cgroup's CPU bandwidth limit (v2's cpu.max, or v1's
// cpu.cfs_quota_us and cpu.cfs_period_us). The library (to tell a quota's
// waits from a competitor's), the agent (a target's limit, a co-runner's
// cgroup, its own memory limit) and the experiments (to check the limit
// they set) all read them here; experiments/cpucap makes cgroups.
package cgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Quota returns the CPU bandwidth limit of the cgroup directory dir: quota
// of CPU time per period. Zeros mean no limit ("max" in v2, -1 in v1), no
// cpu controller there, or files that do not parse.
func Quota(dir string) (quota, period time.Duration) {
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		f := strings.Fields(string(b))
		if len(f) != 2 || f[0] == "max" {
			return 0, 0
		}
		return both(f[0], f[1])
	}
	qb, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	pb, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return both(strings.TrimSpace(string(qb)), strings.TrimSpace(string(pb)))
}

// both parses a quota and a period in µs, both positive, or returns zeros.
func both(quotaUS, periodUS string) (quota, period time.Duration) {
	q, err1 := strconv.ParseInt(quotaUS, 10, 64)
	p, err2 := strconv.ParseInt(periodUS, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, 0
	}
	return time.Duration(q) * time.Microsecond, time.Duration(p) * time.Microsecond
}
