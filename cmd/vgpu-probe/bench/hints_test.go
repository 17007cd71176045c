package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func TestThresholdFlags(t *testing.T) {
	for _, tc := range []struct {
		args string
		ok   bool
	}{
		{"--threshold hints,guest,static", true},
		{"--threshold guest --hints-page /x", false},
		{"--threshold hints --hints-page /dev/shm/vgpu-probe-hints", true},
		{"--threshold telepathy", false},
	} {
		cmd := NewCmd(func(context.Context, *Options) error { return nil })
		cmd.SetArgs(strings.Fields(tc.args))
		cmd.SetOut(&bytes.Buffer{})
		err := cmd.Execute()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, usage.ErrBadInput)) {
			t.Errorf("%s: %v", tc.args, err)
		}
	}
}

// TestThresholdsSim runs the sim benchmark beside a co-runner with each
// threshold source, hints from the publisher bench starts in-process,
// and checks that every row names its source and that the publisher
// followed the cells.
func TestThresholdsSim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--threshold hints loads the agent's eBPF programs: needs root (CI runs as root)")
	}
	var out bytes.Buffer
	var opts *Options
	cmd := NewCmd(func(ctx context.Context, o *Options) error { opts = o; return run(ctx, o) })
	cmd.SetOut(&out)
	cmd.SetArgs(strings.Fields("--device sim --steps 300 --reps 1 --modes hybrid,paper --contention while1 --threshold hints,guest,static --json"))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		if strings.Contains(err.Error(), "eBPF") || strings.Contains(err.Error(), "BPF") {
			t.Skipf("cannot load the eBPF programs here: %v", err)
		}
		t.Fatal(err)
	}
	var doc struct{ Results []Row }
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range doc.Results {
		seen[r.Threshold]++
		t.Logf("%s %s %s: wall %.3f s cpu %.3f s recv p50 %.0f µs", r.Contention, r.Mode, r.Threshold, r.WallS, r.CPUS, r.ReceiveP50US)
	}
	if len(doc.Results) != 6 || seen["hints"] != 2 || seen["guest"] != 2 || seen["static"] != 2 {
		t.Fatalf("rows by threshold %v, want 2 each", seen)
	}
	if opts.feed == nil || opts.feed.Applied() == 0 {
		t.Fatal("the in-process publisher published no switch-in of a cell")
	}
	if _, err := os.Stat(opts.feed.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("hint directory %s left behind", opts.feed.Dir())
	}
}
