package cgroups

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// Membership is one line of /proc/PID/cgroup: a hierarchy and the
// process's path in it.
type Membership struct {
	ID          string   // the hierarchy's number; "0" for the unified (v2) one
	Controllers []string // v1 controllers of the hierarchy ("cpu", "name=systemd"); none for v2
	Path        string   // the cgroup's path inside the hierarchy
}

// Unified reports whether m is the cgroup v2 hierarchy.
func (m Membership) Unified() bool { return m.ID == "0" && len(m.Controllers) == 0 }

// Has reports whether the v1 hierarchy of m has controller c.
func (m Membership) Has(c string) bool { return slices.Contains(m.Controllers, c) }

// Parse reads the lines of a /proc/PID/cgroup file
// ("hierarchy-ID:controllers:path"), skipping malformed ones.
func Parse(b []byte) []Membership {
	var out []Membership
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		m := Membership{ID: parts[0], Path: parts[2]}
		if parts[1] != "" {
			m.Controllers = strings.Split(parts[1], ",")
		}
		out = append(out, m)
	}
	return out
}

// Of returns the cgroups of process pid (0: this process) under proc,
// the /proc mount ("" for /proc).
func Of(proc string, pid int) ([]Membership, error) {
	if proc == "" {
		proc = "/proc"
	}
	who := "self"
	if pid != 0 {
		who = strconv.Itoa(pid)
	}
	b, err := os.ReadFile(proc + "/" + who + "/cgroup")
	if err != nil {
		return nil, err
	}
	return Parse(b), nil
}
