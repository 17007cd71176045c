package targets

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

// ErrNoCgroup is wrapped when a cgroup given to NewCgroup does not exist.
var ErrNoCgroup = errors.New("no such cgroup")

// cgroupRoots are tried, in order, for a path that is not absolute:
// pure cgroup v2 (the GPU hosts), the v1 cpu controller, and the
// controller-less v2 hierarchy that hybrid hosts mount at unified/.
var cgroupRoots = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified"}

// libvirt names vCPU sub-cgroups vcpuN.
var vcpuDir = regexp.MustCompile(`^vcpu(\d+)$`)

// Cgroup watches every thread in a cgroup directory and its descendants.
type Cgroup struct {
	dir   string // absolute directory
	name  string // as the user gave it
	every time.Duration
}

var _ Source = (*Cgroup)(nil)

// NewCgroup resolves path (absolute, or relative to a cgroup mount) and
// checks it is a cgroup directory. every is the re-scan period.
func NewCgroup(path string, every time.Duration) (*Cgroup, error) {
	dir, err := ResolveCgroup(path)
	if err != nil {
		return nil, err
	}
	return &Cgroup{dir: dir, name: path, every: every}, nil
}

// ResolveCgroup finds the directory of a cgroup path: v1 directories have
// a "tasks" file, v2 ones "cgroup.threads"; both have "cgroup.procs".
func ResolveCgroup(path string) (string, error) {
	cands := []string{path}
	if !filepath.IsAbs(path) {
		cands = cands[:0]
		for _, r := range cgroupRoots {
			cands = append(cands, filepath.Join(r, path))
		}
	}
	for _, c := range cands {
		if _, err := os.Stat(filepath.Join(c, "cgroup.procs")); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("cgroup %q: %w (looked in %s)", path, ErrNoCgroup, strings.Join(cands, ", "))
}

// Run implements Source.
func (c *Cgroup) Run(ctx context.Context) <-chan Event {
	return poll(ctx, c.every, c.scan)
}

func (c *Cgroup) scan() (Target, error) {
	if _, err := os.Stat(filepath.Join(c.dir, "cgroup.procs")); err != nil {
		return Target{}, fmt.Errorf("cgroup %q: %w", c.name, ErrNoCgroup)
	}
	t := Target{Kind: KindCgroup, Name: c.name}
	quota, period := cgroups.Quota(c.dir)
	t.PeriodUS, t.QuotaUS = period.Microseconds(), quota.Microseconds()
	seen := map[int]bool{}
	err := filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// A child cgroup removed during the walk.
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		vcpu := -1
		if m := vcpuDir.FindStringSubmatch(d.Name()); m != nil {
			vcpu, _ = strconv.Atoi(m[1])
		}
		tids, err := cgroupThreads(p)
		if err != nil {
			return err
		}
		for _, tid := range tids {
			if !seen[tid] {
				seen[tid] = true
				t.Threads = append(t.Threads, Thread{TID: tid, VCPU: vcpu})
			}
		}
		return nil
	})
	if err != nil {
		return Target{}, fmt.Errorf("scanning cgroup %q: %w", c.name, err)
	}
	slices.SortFunc(t.Threads, func(a, b Thread) int { return a.TID - b.TID })
	return t, nil
}

// cgroupThreads lists the thread ids directly in one cgroup directory. v1:
// "tasks" holds every thread. v2: "cgroup.threads" holds every thread of a
// threaded cgroup and, for a domain cgroup, the threads of its processes
// (the kernel lists member threads there too).
func cgroupThreads(dir string) ([]int, error) {
	for _, f := range []string{"tasks", "cgroup.threads"} {
		ids, err := readIDs(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		return ids, err
	}
	// Neither file: a v2 kernel too old for cgroup.threads; expand
	// processes to their threads.
	pids, err := readIDs(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []int
	for _, pid := range pids {
		th, err := processThreads("/proc", pid)
		if err != nil {
			continue // exited
		}
		for _, t := range th {
			out = append(out, t.TID)
		}
	}
	return out, nil
}

func readIDs(path string) ([]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			out = append(out, n)
		}
	}
	return out, sc.Err()
}
