package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTracks parses tracefs sched_switch lines into on/off intervals of
// the runner and the co-runner, in ns since t0, and ignores the rest.
func TestTracks(t *testing.T) {
	dir := t.TempDir()
	lines := `# tracer: nop
          <idle>-0       [001] d..2.   100.000100: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=runner next_pid=10 next_prio=120
          runner-10      [001] d..2.   100.004100: sched_switch: prev_comm=runner prev_pid=10 prev_prio=120 prev_state=R+ ==> next_comm=vgpu-probe next_pid=21 next_prio=120
      vgpu-probe-21      [001] d..2.   100.008100: sched_switch: prev_comm=vgpu-probe prev_pid=21 prev_prio=120 prev_state=R ==> next_comm=runner next_pid=10 next_prio=120
          runner-10      [001] d..2.   100.009000: sched_switch: prev_comm=runner prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
garbage line
`
	if err := os.WriteFile(filepath.Join(dir, "trace"), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := &tracer{dir: dir}
	tracks, err := tr.tracks(100_000_000_000, 10, map[int]bool{21: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(tracks) != 2 {
		t.Fatalf("tracks = %+v", tracks)
	}
	run, co := tracks[0], tracks[1]
	if run.Name != "runner vcpu0" || run.TID != 10 || co.Name != "corunner1 vcpu0" || co.TID != 21 {
		t.Errorf("names: %+v %+v", run, co)
	}
	want := []struct {
		start, end int64
		on         bool
	}{{100_000, 4_100_000, true}, {4_100_000, 8_100_000, false}, {8_100_000, 9_000_000, true}}
	if len(run.Intervals) != len(want) {
		t.Fatalf("runner intervals = %+v", run.Intervals)
	}
	for i, w := range want {
		if iv := run.Intervals[i]; iv.Start != w.start || iv.End != w.end || iv.On != w.on {
			t.Errorf("interval %d = %+v, want %+v", i, iv, w)
		}
	}
	if len(co.Intervals) != 1 || !co.Intervals[0].On || co.Intervals[0].Start != 4_100_000 || co.Intervals[0].End != 8_100_000 {
		t.Errorf("co-runner intervals = %+v", co.Intervals)
	}
}
