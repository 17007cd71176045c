// Package cpucap creates CPU-bandwidth-limited cgroups for experiments, on
// cgroup v2 (the unified hierarchy at /sys/fs/cgroup, as on most current
// distributions) and on cgroup v1 (the cpu controller mounted at
// /sys/fs/cgroup/cpu). Everything it creates it can remove again.
package cpucap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-probe/vgpu-probe/proctree"
)

// ErrNoCPUController means neither hierarchy offers CPU bandwidth control.
var ErrNoCPUController = errors.New("no cgroup cpu controller (want cgroup v2 with the cpu controller, or v1 cpu mounted at /sys/fs/cgroup/cpu)")

// Root is where cgroup hierarchies are mounted; tests may point it elsewhere.
var Root = "/sys/fs/cgroup"

// Version tells which hierarchy a Group lives in.
type Version int

// Hierarchies.
const (
	V1 Version = 1
	V2 Version = 2
)

// Group is one cgroup made by this package.
type Group struct {
	Path    string
	Version Version
}

// Detect returns the hierarchy that offers CPU bandwidth control, v2 first.
func Detect() (Version, error) {
	if b, err := os.ReadFile(filepath.Join(Root, "cgroup.controllers")); err == nil && hasWord(string(b), "cpu") {
		return V2, nil
	}
	if _, err := os.Stat(filepath.Join(Root, "cpu", "cpu.cfs_quota_us")); err == nil {
		return V1, nil
	}
	return 0, ErrNoCPUController
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// Create makes the cgroup name (e.g. "vgpu-probe-1234-cap") with a CPU
// bandwidth of quota per period; quota 0 means unlimited. It fails if the
// cgroup exists already, so two runs never share one.
func Create(name string, quota, period time.Duration) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup name %q: want a plain name", name)
	}
	v, err := Detect()
	if err != nil {
		return nil, err
	}
	g := &Group{Version: v}
	if v == V2 {
		// The cpu controller must be enabled for the root's children.
		if err := enableCPU(Root); err != nil {
			return nil, err
		}
		g.Path = filepath.Join(Root, name)
	} else {
		g.Path = filepath.Join(Root, "cpu", name)
	}
	if err := os.Mkdir(g.Path, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if err := g.SetBandwidth(quota, period); err != nil {
		g.Remove()
		return nil, err
	}
	return g, nil
}

func enableCPU(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err == nil && hasWord(string(b), "cpu") {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
		return fmt.Errorf("enable cgroup v2 cpu controller in %s: %w", dir, err)
	}
	return nil
}

// SetBandwidth limits the group to quota of CPU time per period; quota 0
// removes the limit.
func (g *Group) SetBandwidth(quota, period time.Duration) error {
	if quota < 0 || (quota > 0 && (period < time.Millisecond || period > time.Second)) {
		return fmt.Errorf("cpu bandwidth %v per %v: want a quota >= 0 and a period of 1ms..1s", quota, period)
	}
	var err error
	if g.Version == V2 {
		v := "max 100000"
		if quota > 0 {
			v = fmt.Sprintf("%d %d", quota.Microseconds(), period.Microseconds())
		}
		err = os.WriteFile(filepath.Join(g.Path, "cpu.max"), []byte(v), 0)
	} else {
		q := "-1"
		if quota > 0 {
			// Period first: the kernel rejects a quota set against an
			// old period that would make it invalid.
			err = os.WriteFile(filepath.Join(g.Path, "cpu.cfs_period_us"), []byte(strconv.FormatInt(period.Microseconds(), 10)), 0)
			q = strconv.FormatInt(quota.Microseconds(), 10)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(g.Path, "cpu.cfs_quota_us"), []byte(q), 0)
		}
	}
	if err != nil {
		return fmt.Errorf("set cpu bandwidth of %s: %w", g.Path, err)
	}
	return nil
}

// Add moves the process pid (all its threads) into the group.
func (g *Group) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(g.Path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move pid %d into %s: %w", pid, g.Path, err)
	}
	return nil
}

// AddTree moves pid and every process descended from it into the group:
// a child does not follow its parent into a cgroup, so a program moved
// after it has started its workers (a wrapper script and the engine it
// runs) would leave them outside the limit. Parents go first; what a
// moved process forks from then on is born in the group, so one more walk
// catches a child forked during the move, into the old group. A
// descendant that exits meanwhile is skipped; pid itself must be there.
func (g *Group) AddTree(pid int) error {
	if err := g.Add(pid); err != nil {
		return err
	}
	moved := map[int]bool{}
	for range 2 {
		for _, p := range proctree.Descendants(pid) {
			if moved[p] {
				continue
			}
			if err := g.Add(p); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			moved[p] = true
		}
	}
	return nil
}

// threadedChild is the v2 child of a group that holds the limit of the
// single threads AddThread put in it.
const threadedChild = "thread"

// AddThread puts the one thread tid of process pid under the group's
// limit, the process's other threads not. v1 takes a thread id in tasks.
// v2 takes single threads only inside a threaded subtree: the whole
// process goes into the group, whose limit moves to a threaded child that
// the thread goes into.
func (g *Group) AddThread(pid, tid int) error {
	if g.Version == V1 {
		if err := os.WriteFile(filepath.Join(g.Path, "tasks"), []byte(strconv.Itoa(tid)), 0); err != nil {
			return fmt.Errorf("move thread %d into %s: %w", tid, g.Path, err)
		}
		return nil
	}
	limit, err := os.ReadFile(filepath.Join(g.Path, "cpu.max"))
	if err != nil {
		return fmt.Errorf("read cpu.max of %s: %w", g.Path, err)
	}
	child := filepath.Join(g.Path, threadedChild)
	steps := []struct{ path, value string }{
		{filepath.Join(child, "cgroup.type"), "threaded"},
		{filepath.Join(g.Path, "cgroup.subtree_control"), "+cpu"},
		{filepath.Join(child, "cpu.max"), strings.TrimSpace(string(limit))},
		{filepath.Join(g.Path, "cpu.max"), "max"},
		{filepath.Join(g.Path, "cgroup.procs"), strconv.Itoa(pid)},
		{filepath.Join(child, "cgroup.threads"), strconv.Itoa(tid)},
	}
	if err := os.Mkdir(child, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create threaded cgroup: %w", err)
	}
	for _, st := range steps {
		if err := os.WriteFile(st.path, []byte(st.value), 0); err != nil {
			return fmt.Errorf("put thread %d of %d under the limit of %s: %s: %w", tid, pid, g.Path, st.path, err)
		}
	}
	return nil
}

// Remove deletes the group, first moving any process left in it back to
// the parent (a cgroup with members cannot be removed), and the threaded
// child AddThread made. Removing a group already gone is not an error.
func (g *Group) Remove() error {
	parent := filepath.Join(filepath.Dir(g.Path), "cgroup.procs")
	var err error
	for range 50 {
		b, rerr := os.ReadFile(filepath.Join(g.Path, "cgroup.procs"))
		if errors.Is(rerr, os.ErrNotExist) {
			return nil
		}
		for _, pid := range strings.Fields(string(b)) {
			os.WriteFile(parent, []byte(pid), 0)
		}
		os.Remove(filepath.Join(g.Path, threadedChild)) // empty once the process left
		if err = os.Remove(g.Path); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// Exiting members linger for a moment.
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", g.Path, err)
}
