package bench

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
)

// TestThresholdsSim runs the sim benchmark beside a co-runner with each
// threshold source, hints from the publisher the run starts in-process,
// and checks that every row names its source, that the publisher followed
// the cells and that its directory is gone afterwards.
func TestThresholdsSim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--threshold hints loads the agent's eBPF programs: needs root (CI runs as root)")
	}
	o := small(t)
	o.Modes = []hybridsync.Mode{hybridsync.ModeHybrid, hybridsync.ModePaper}
	o.Contentions = []string{"while1"}
	o.Thresholds = workload.Thresholds
	r := newRun(o)
	rows, err := r.do(context.Background())
	if err != nil {
		if strings.Contains(err.Error(), "eBPF") || strings.Contains(err.Error(), "BPF") {
			t.Skipf("cannot load the eBPF programs here: %v", err)
		}
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, row := range rows {
		seen[row.Threshold]++
		t.Logf("%s %s %s: wall %.3f s cpu %.3f s recv p50 %.0f µs", row.Contention, row.Mode, row.Threshold, row.WallS, row.CPUS, row.ReceiveP50US)
	}
	if len(rows) != 6 || seen["hints"] != 2 || seen["guest"] != 2 || seen["static"] != 2 {
		t.Fatalf("rows by threshold %v, want 2 each", seen)
	}
	if r.feed == nil || r.feed.Applied() == 0 {
		t.Fatal("the in-process publisher published no switch-in of a cell")
	}
	if _, err := os.Stat(r.feed.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("hint directory %s left behind", r.feed.Dir())
	}
}

// small is a short sim matrix on the last CPU this process may use.
func small(t *testing.T) Options {
	t.Helper()
	cpus, err := corunner.Online()
	if err != nil {
		t.Fatal(err)
	}
	return Options{Device: "sim", Steps: 300, Reps: 1, HostWork: 200 * time.Microsecond,
		Profile: simdev.Fixed("kernel", 500*time.Microsecond, 0), CapQuota: 10 * time.Millisecond, CapPeriod: 20 * time.Millisecond,
		CPU: cpus[len(cpus)-1], Thresholds: []string{workload.ThresholdGuest}, Progress: nopProgress{}}
}

type nopProgress struct{}

func (nopProgress) Begin(int)   {}
func (nopProgress) Next(string) {}
func (nopProgress) Advance()    {}

// TestHintsMitigated: with --threshold hints and a mitigation, the page
// the run publishes carries the slice in the slot of the cell's thread
// (read as the cell's library reads it), and the cell runs with the
// kernel's slice set.
func TestHintsMitigated(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--threshold hints loads the agent's eBPF programs and --mitigate sets the cells' slices: needs root (CI runs as root)")
	}
	const slice = 100 * time.Microsecond
	if _, err := mitigate.Check(mitigate.System, uint64(slice)); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	o := small(t)
	o.Modes = []hybridsync.Mode{hybridsync.ModeBlock}
	o.Contentions = []string{"none"}
	o.Thresholds = []string{workload.ThresholdHints}
	o.Mitigation = &mitigate.Config{Slice: slice}
	r := newRun(o)
	type seen struct {
		page, kernel time.Duration
		ok           bool
	}
	var cells []seen
	r.watched = func(pid int) {
		h := signal.NewHintSource(r.feed.Path(cellName), nil, nil)
		var s seen
		for end := time.Now().Add(2 * time.Second); !s.ok && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			s.page, s.ok = h.Mitigation(pid)
		}
		if a, err := unix.SchedGetAttr(pid, 0); err == nil {
			s.kernel = time.Duration(a.Runtime)
		}
		cells = append(cells, s)
	}
	rows, err := r.do(context.Background())
	if err != nil {
		if strings.Contains(err.Error(), "BPF") {
			t.Skipf("cannot load the eBPF programs here: %v", err)
		}
		t.Fatal(err)
	}
	if len(rows) != 1 || len(cells) != 1 {
		t.Fatalf("%d rows, %d cells watched; want 1 and 1", len(rows), len(cells))
	}
	if c := cells[0]; !c.ok || c.page != slice || c.kernel != slice {
		t.Errorf("the cell's slot: mitigation %v (present %v), its slice in the kernel %v; want %v in both", c.page, c.ok, c.kernel, slice)
	}
}
