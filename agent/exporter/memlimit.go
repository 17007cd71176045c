package exporter

import (
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

// cgroupRoot is where cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// memoryLimit is the smallest memory limit on this process's cgroup and
// its ancestors (systemd's MemoryMax, a container's limit), v2 or v1;
// 0 when there is none.
func memoryLimit() uint64 {
	ms, err := cgroups.Of("", 0)
	if err != nil {
		return 0
	}
	var limit uint64
	for _, m := range ms {
		var dir, file string
		switch {
		case m.Unified():
			dir, file = cgroupRoot, "memory.max"
			if _, err := os.Stat(filepath.Join(cgroupRoot, "unified")); err == nil {
				dir = filepath.Join(cgroupRoot, "unified") // hybrid: v2 mounted beside v1
			}
		case m.Has("memory"):
			dir, file = filepath.Join(cgroupRoot, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean(m.Path); ; p = path.Dir(p) {
			if v := readLimit(filepath.Join(dir, p, file)); v > 0 && (limit == 0 || v < limit) {
				limit = v
			}
			if p == "/" {
				break
			}
		}
	}
	return limit
}

// readLimit reads one limit file; "max", v1's "unlimited" (a huge
// number) and absent files are 0.
func readLimit(p string) uint64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v >= 1<<62 {
		return 0
	}
	return v
}
