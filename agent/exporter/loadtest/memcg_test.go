package loadtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memcg is a memory-limited cgroup: v2 where the unified hierarchy has the
// memory controller, else v1's memory hierarchy.
type memcg struct {
	path string
	v2   bool
}

const cgRoot = "/sys/fs/cgroup"

func newMemcg(name string, limit int64) (*memcg, error) {
	if b, err := os.ReadFile(filepath.Join(cgRoot, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
		// Children of the root get the controller only once it is enabled.
		_ = os.WriteFile(filepath.Join(cgRoot, "cgroup.subtree_control"), []byte("+memory"), 0)
		g := &memcg{path: filepath.Join(cgRoot, name), v2: true}
		if err := os.Mkdir(g.path, 0o755); err != nil {
			return nil, err
		}
		_ = os.WriteFile(filepath.Join(g.path, "memory.swap.max"), []byte("0"), 0)
		return g, g.write("memory.max", limit)
	}
	if _, err := os.Stat(filepath.Join(cgRoot, "memory", "memory.limit_in_bytes")); err != nil {
		return nil, errors.New("no cgroup memory controller (v2 unified or v1 memory)")
	}
	g := &memcg{path: filepath.Join(cgRoot, "memory", name)}
	if err := os.Mkdir(g.path, 0o755); err != nil {
		return nil, err
	}
	if err := g.write("memory.limit_in_bytes", limit); err != nil {
		return g, err
	}
	// Swap would hide an overrun; not every kernel accounts it.
	_ = g.write("memory.memsw.limit_in_bytes", limit)
	return g, nil
}

func (g *memcg) write(file string, v int64) error {
	return os.WriteFile(filepath.Join(g.path, file), []byte(strconv.FormatInt(v, 10)), 0)
}

// procsFile is where a process is moved into the group.
func (g *memcg) procsFile() string { return filepath.Join(g.path, "cgroup.procs") }

// peak is the group's highest memory use so far.
func (g *memcg) peak() (int64, error) {
	f := "memory.max_usage_in_bytes"
	if g.v2 {
		f = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(g.path, f))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// ooms is the OOM kills in the group (v1 without oom_kill: its OOM events).
func (g *memcg) ooms() (int64, error) {
	file, keys := "memory.oom_control", []string{"oom_kill", "under_oom"}
	if g.v2 {
		file, keys = "memory.events", []string{"oom_kill"}
	}
	b, err := os.ReadFile(filepath.Join(g.path, file))
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == k {
				return strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s: no %v", file, keys)
}

func (g *memcg) remove() error { return os.Remove(g.path) }
