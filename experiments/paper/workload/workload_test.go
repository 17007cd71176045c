package workload

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/results"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func TestRunRecordsEveryStep(t *testing.T) {
	s := hybridsync.New(hybridsync.Config{})
	cfg := Config{Steps: 50, Work: Calibrate(50 * time.Microsecond), Profile: simdev.Mixed, Timeline: true}
	r, err := Run(cfg, SimDevice{Dev: simdev.New(1)}, s.Sync)
	if err != nil {
		t.Fatal(err)
	}
	if r.Steps != 50 || len(r.Timeline) != 50 {
		t.Fatalf("steps %d, timeline %d; want 50", r.Steps, len(r.Timeline))
	}
	for i, st := range r.Timeline {
		if !(st.HostStart <= st.HostEnd && st.HostEnd <= st.Launch && st.Launch <= st.Complete && st.Complete <= st.Noticed) {
			t.Fatalf("step %d out of order: %+v", i, st)
		}
		if i > 0 && st.HostStart < r.Timeline[i-1].Noticed {
			t.Fatalf("step %d started before step %d's kernel was noticed", i, i-1)
		}
	}
	// The mixed profile has a 2 ms kernel every third step: 50 steps take
	// at least 17 of them.
	if r.WallS < 0.034 {
		t.Errorf("wall %.3f s is shorter than the kernels alone", r.WallS)
	}
	if r.ReceiveP50US < 0 || r.ReceiveP99US < r.ReceiveP50US {
		t.Errorf("receive p50 %.1f p99 %.1f", r.ReceiveP50US, r.ReceiveP99US)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Steps: 0, Profile: simdev.Mixed}, {Steps: 1, Work: -1, Profile: simdev.Mixed}, {Steps: 1}} {
		if _, err := Run(cfg, SimDevice{Dev: simdev.New(1)}, hybridsync.New(hybridsync.Config{}).Sync); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}

// TestRunCellInCgroup runs a real child process in a real capped cgroup:
// the loop runs, its CPU time is measured, and the cap slows a spinning
// wait (which needs the CPU) far more than a blocking one.
func TestRunCellInCgroup(t *testing.T) {
	var cg *cpucap.Group
	if os.Geteuid() == 0 {
		if _, err := cpucap.Detect(); err == nil {
			g, err := cpucap.Create(fmt.Sprintf("vgpu-probe-test-cell-%d", os.Getpid()), 5*time.Millisecond, 20*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Remove() })
			cg = g
		}
	}
	if cg == nil {
		t.Log("not root or no cgroup cpu controller: running the cell without a cap")
	}
	cell := Cell{Config: Config{Steps: 200, Work: Calibrate(100 * time.Microsecond), Profile: simdev.Fixed("k", 400*time.Microsecond, 0)}, Device: "sim", CPU: -1}
	walls := map[hybridsync.Mode]float64{}
	w := disturbance.Start()
	for _, m := range []hybridsync.Mode{hybridsync.ModeSpin, hybridsync.ModeBlock} {
		cell.Mode = m
		r, err := RunCell(context.Background(), cell, cg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Steps != 200 || r.CPUS <= 0 {
			t.Fatalf("%v: steps %d cpu %.3f", m, r.Steps, r.CPUS)
		}
		walls[m] = r.WallS
	}
	// Other work on the machine slows the blocking cell's every wake-up
	// and narrows the gap: 0.42 s against 0.31 s beside two busy loops.
	if cg != nil && walls[hybridsync.ModeSpin] < 1.5*walls[hybridsync.ModeBlock] {
		w.Stop().Check(t, 0.05, fmt.Sprintf("under a 25%% cap spin took %.3f s, block %.3f s; spinning should be throttled", walls[hybridsync.ModeSpin], walls[hybridsync.ModeBlock]))
	}
}

func TestRunCellCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cell := Cell{Config: Config{Steps: 1 << 30, Profile: simdev.Fixed("k", time.Millisecond, 0)}, Device: "sim", CPU: -1, Mode: hybridsync.ModeSpin}
	if _, err := RunCell(ctx, cell, nil); err == nil {
		t.Fatal("a cancelled cell reported success")
	}
}

func TestMedian(t *testing.T) {
	m := Median([]results.Result{{WallS: 3, CPUS: 1}, {WallS: 1, CPUS: 3}, {WallS: 2, CPUS: 2}})
	if m.WallS != 2 || m.CPUS != 2 {
		t.Errorf("median %+v", m)
	}
}
