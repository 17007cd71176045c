package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/proctree"
)

// TestMain lets the cells and co-runners, which are this test binary
// started again, run their entry points.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// cancelAfter cancels the run once n measurements have finished.
type cancelAfter struct {
	nopProgress
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Advance() {
	if c.n--; c.n == 0 {
		c.cancel()
	}
}

// TestCancelKeepsFinishedCells: cancelled after three of the four cells
// (two settings x two modes, one repetition), the run returns those three
// rows with the cancellation, and stops the co-runner it started.
func TestCancelKeepsFinishedCells(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := small(t)
	o.Modes = []hybridsync.Mode{hybridsync.ModeSpin, hybridsync.ModeBlock}
	o.Contentions = []string{"none", "while1"}
	o.Progress = &cancelAfter{n: 3, cancel: cancel}
	rows, err := Run(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want the cancellation", err)
	}
	if len(rows) != 3 || rows[2].Contention != "while1" || rows[2].Mode != "spin" {
		t.Fatalf("rows %+v, want none/spin, none/block, while1/spin", rows)
	}
	for _, k := range proctree.Children(os.Getpid()) {
		t.Errorf("process %d left running", k)
	}
}

// TestPartialRepsLeftOut: a cell that has not finished every repetition
// is not a row.
func TestPartialRepsLeftOut(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := small(t)
	o.Reps = 2
	o.Modes = []hybridsync.Mode{hybridsync.ModeSpin, hybridsync.ModeBlock}
	o.Contentions = []string{"none"}
	// Both modes' first repetition and spin's second.
	o.Progress = &cancelAfter{n: 3, cancel: cancel}
	rows, err := Run(ctx, o)
	if !errors.Is(err, context.Canceled) || len(rows) != 1 || rows[0].Mode != "spin" {
		t.Fatalf("rows %+v, err %v: want spin alone, cancelled", rows, err)
	}
}

func TestPrintTable(t *testing.T) {
	var b bytes.Buffer
	rows := []Row{{Contention: "none", Mode: "spin", Threshold: "guest", WallS: 0.5}, {Contention: "while1", Mode: "spin", Threshold: "guest", WallS: 1}}
	if err := PrintTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "2.00") || !strings.Contains(lines[1], "1.00") {
		t.Errorf("table:\n%s", b.String())
	}
}
