package exporter

import (
	"bufio"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoot is where cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// memoryLimit is the smallest memory limit on this process's cgroup and
// its ancestors (systemd's MemoryMax, a container's limit), v2 or v1;
// 0 when there is none.
func memoryLimit() uint64 {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	defer f.Close()
	var limit uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = cgroupRoot, "memory.max"
			if _, err := os.Stat(filepath.Join(cgroupRoot, "unified")); err == nil {
				dir = filepath.Join(cgroupRoot, "unified") // hybrid: v2 mounted beside v1
			}
		case hasController(parts[1], "memory"):
			dir, file = filepath.Join(cgroupRoot, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean(parts[2]); ; p = path.Dir(p) {
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

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
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
