package libvirt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/experiments/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/backend/libvirt/job"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/experiments/reexec"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// The host's busy loops are co-runner children of the test binary.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// Where make vmimage-openmp's guest has its files (vmimages/openmp-payload.sh).
const (
	guestLauncher = "/opt/hybridsync/bin/hybridsync-run"
	guestProgram  = "/bin/ompbarrier"
	guestStats    = "/tmp/hybridsync-stats.json"
)

// ompbarrier's arguments: steps, parallel regions per step, µs of work per
// thread and region, µs of serial work per step (µs as the program
// measured its own speed at start, under TCG). Every region ends in a
// barrier, where libgomp's default spin (~300,000 iterations, milliseconds
// under TCG) is what a neighbour on the vCPU's host CPU pays for.
var ompArgs = []string{"400", "8", "50", "50"}

// TestE2EOpenMPHints: inside a VM the guest's hint page is what tells
// libhybridsync that the host's CPUs are shared. A TCG guest with two
// vCPUs under libvirt gets the agent's page (the runner's <shmem>, as
// run --hints gives it); a busy loop on the host is pinned on the CPU of
// each vCPU thread. In the guest an OpenMP program with one thread per
// vCPU (GNU libgomp, built with gcc -fopenmp) runs under hybridsync-run's
// default twice: with HYBRIDSYNC_HINTS naming the page, the library bounds
// libgomp's spin (stats: spin_live); without it the host's loops are
// invisible in the guest (TCG reports no steal, and the guest itself is
// not oversubscribed), and the spin stays libgomp's default.
func TestE2EOpenMPHints(t *testing.T) {
	e2e(t)
	l := libvirttest.Connect(t)
	dir := openmpImage(t)
	cpus := twoCPUs(t)
	feed, err := hintfeed.Start(t.Context(), hintfeed.Options{Kind: targets.KindDomain, Hints: true, Dir: hints.DefaultDir})
	if err != nil {
		t.Fatalf("hint feed (the agent's page publisher, as run --hints starts it): %v", err)
	}
	defer feed.Close()
	b := &Backend{ImageDir: dir, Hints: feed, Log: func(m string) { t.Log(m) }}
	be, err := b.Create(t.Context(), backend.Topology{Runner: backend.VM{Name: "runner", CPUs: cpus}}, backend.Load{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := be.Destroy(); err != nil {
			t.Error(err)
		}
		checkClean(t, l)
		if p, _ := filepath.Glob("/dev/shm/" + hintpage.FilePrefix + namePrefix(os.Getpid()) + "*"); len(p) > 0 {
			t.Errorf("hint pages left behind: %v", p)
		}
	}()
	e := be.(*env)
	loops, err := corunner.Start("while1", cpus)
	if err != nil {
		t.Fatal(err)
	}
	defer loops.Stop()
	name, _ := e.Domains()
	waitPageShared(t, feed.Path(name), len(cpus))

	without := runOpenMP(t, e, false)
	with := runOpenMP(t, e, true)
	checkOpenMPRuns(t, without, with)
}

// openmpImage is make vmimage-openmp's image dir ($VGPU_OPENMP_IMAGE, as
// make e2e sets it), or the test is skipped (failed under make e2e).
func openmpImage(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VGPU_OPENMP_IMAGE")
	if dir == "" {
		libvirttest.Unavailable(t, "VGPU_OPENMP_IMAGE unset: build the OpenMP guest with make vmimage-openmp (make e2e does both)")
	}
	b, err := os.ReadFile(filepath.Join(dir, "stamp"))
	if lines := strings.Split(string(b), "\n"); err != nil || len(lines) < 3 || lines[1] == "none" || lines[2] == "none" {
		libvirttest.Unavailable(t, "%s is not make vmimage-openmp's image (stamp: %v): build it with make vmimage-openmp", dir, err)
	}
	return dir
}

// twoCPUs are the last two CPUs this process may use: one per vCPU, so
// that the guest's two vCPU threads have a host CPU each.
func twoCPUs(t *testing.T) []int {
	t.Helper()
	cpus, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		libvirttest.Unavailable(t, "the OpenMP test needs two CPUs, this process has %v", cpus)
	}
	return cpus[len(cpus)-2:]
}

// waitPageShared waits until the page says, for each of the first n vCPU
// slots, that the vCPU's CPU is shared: the agent saw the host's loops.
// Without that the test would test nothing.
func waitPageShared(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var seen []uint8
	for time.Now().Before(deadline) {
		if seen = pageContention(path, n); len(seen) == n && allShared(seen) {
			t.Logf("the page %s says each vCPU's CPU is shared", path)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the page %s: vCPU contention %v after 60s, want %d slots shared (%d)", path, seen, n, hintpage.ContShared)
}

func pageContention(path string, n int) []uint8 {
	f, err := hintpage.Map(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []uint8
	for i := range n {
		var s hintpage.Slot
		if f.ReadSlot(i, &s) != nil {
			return out
		}
		out = append(out, s.Contention)
	}
	return out
}

func allShared(cs []uint8) bool {
	for _, c := range cs {
		if c != hintpage.ContShared {
			return false
		}
	}
	return true
}

// openmpRun is one run of ompbarrier in the guest.
type openmpRun struct {
	withPage bool
	wallS    float64 // the command's, launcher and start-up included
	stepUS   float64 // the program's own, over its steps after the first tenth
	spin     hybridsync.OMPFollowStats
}

func (r openmpRun) String() string {
	page := "without the page"
	if r.withPage {
		page = "with the page"
	}
	return fmt.Sprintf("%s: %.1fs wall, %.0f µs a step; spin_live %+v", page, r.wallS, r.stepUS, r.spin)
}

// runOpenMP runs ompbarrier under hybridsync-run's default in the guest,
// with HYBRIDSYNC_HINTS naming the page the guest's init exposed or
// without, and returns what its stats and its stderr said.
func runOpenMP(t *testing.T, e *env, withPage bool) openmpRun {
	t.Helper()
	env := []string{"HYBRIDSYNC_STATS=" + guestStats, "HYBRIDSYNC_LOG=info", "OMP_PROC_BIND=true", "OMP_PLACES=cores"}
	if withPage {
		env = append(env, hybridsync.EnvHints+"="+job.HintPage)
	}
	argv := append([]string{guestLauncher, guestProgram}, ompArgs...)
	c, err := e.Command(t.Context(), argv, env, guestStats)
	if err != nil {
		t.Fatal(err)
	}
	r := openmpRun{withPage: withPage, wallS: c.WallS}
	if c.ExitCode != 0 || c.FileError != "" {
		t.Fatalf("%v (with the page: %v): exit %d, stats: %s; stderr:\n%s", argv, withPage, c.ExitCode, c.FileError, c.Stderr)
	}
	t.Logf("guest stderr (with the page: %v):\n%s", withPage, c.Stderr)
	line := c.Stderr[strings.LastIndex(c.Stderr, "ompbarrier threads"):]
	var threads int
	var cpuUS float64
	if _, err := fmt.Sscanf(line, "ompbarrier threads %d step_us %g cpu_us %g", &threads, &r.stepUS, &cpuUS); err != nil || threads != 2 {
		t.Fatalf("ompbarrier's line %q: %v, want 2 threads", line, err)
	}
	var doc struct {
		OpenMP *struct {
			Runtime  string                     `json:"runtime"`
			SpinLive *hybridsync.OMPFollowStats `json:"spin_live"`
		} `json:"openmp"`
	}
	if err := json.Unmarshal([]byte(c.File), &doc); err != nil || doc.OpenMP == nil || doc.OpenMP.SpinLive == nil {
		t.Fatalf("stats %s: %v, want openmp.spin_live:\n%s", guestStats, err, c.File)
	}
	r.spin = *doc.OpenMP.SpinLive
	t.Logf("%v", r)
	return r
}

// checkOpenMPRuns: the page bounded the spin, and without it the host's
// loops did not.
func checkOpenMPRuns(t *testing.T, without, with openmpRun) {
	t.Helper()
	w := with.spin
	if !w.Active || w.Contended == 0 || w.Changes < 1 || w.SpinCount != hybridsync.GompSpinBounded {
		t.Errorf("with the page: spin_live %+v, want active, contended windows, the spin bounded to %d", w, hybridsync.GompSpinBounded)
	}
	wo := without.spin
	if !wo.Active || wo.SpinCount != hybridsync.GompSpinMarker {
		t.Errorf("without the page: spin_live %+v, want active and libgomp's default spin (%d) at the end", wo, hybridsync.GompSpinMarker)
	}
	t.Logf("wall: %.1fs without the page, %.1fs with it (%.2fx); a step: %.0f µs without, %.0f µs with (%.2fx)",
		without.wallS, with.wallS, without.wallS/with.wallS, without.stepUS, with.stepUS, without.stepUS/with.stepUS)
}
