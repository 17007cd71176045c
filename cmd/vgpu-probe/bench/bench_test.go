package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/internal/disturbance"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/results"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func TestFlags(t *testing.T) {
	var got *Options
	cmd := NewCmd(func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--modes", "hybrid,block", "--contention", "none,cap+while1", "--reps", "5", "--profile", "mixed", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if len(got.run.Modes) != 2 || got.run.Modes[1].String() != "block" || got.Contention[1] != "cap+while1" || got.Reps != 5 || !got.JSON {
		t.Errorf("options %+v", got)
	}
	if len(got.run.Profile.Kernels) != 3 {
		t.Errorf("mixed profile has %d kernels", len(got.run.Profile.Kernels))
	}
	if got.run.CPU < 0 {
		t.Errorf("default cpu not resolved: %d", got.run.CPU)
	}
}

// TestRunJSON runs a small real matrix (child processes, a real co-runner,
// a real cgroup when root) and checks the JSON has exactly the documented
// fields, and that the contention shows: spinning against a busy loop on
// the same CPU is slower than spinning alone (where other work on the
// machine slowed the cell alone as much, that miss skips, naming it).
func TestRunJSON(t *testing.T) {
	contention := "none,while1"
	if os.Geteuid() == 0 {
		if _, err := cpucap.Detect(); err == nil {
			contention += ",cap"
		}
	}
	var out bytes.Buffer
	cmd := NewCmd(nil)
	cmd.SetOut(&out)
	dir := t.TempDir()
	cmd.SetArgs([]string{"--steps", "150", "--reps", "1", "--modes", "spin,block,hybrid", "--contention", contention, "--json", "--out", dir})
	w := disturbance.Start()
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	disturbed := w.Stop()
	// --json prints the results document, nothing but its fields; its
	// bench part is the table's rows (read here as maps, to count their
	// fields; the outer Bench shadows the document's own).
	var doc struct {
		results.File
		Bench struct {
			Results []map[string]any `json:"results"`
		} `json:"bench"`
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil || doc.Kind != results.KindBench || len(doc.Cells) == 0 {
		t.Fatalf("--json: %v, kind %q, %d cells", err, doc.Kind, len(doc.Cells))
	}
	want := []string{"contention", "mode", "threshold", "wall_s", "cpu_s", "steps", "receive_p50_us", "receive_p99_us", "launch_p50_us", "launch_p99_us"}
	wall := map[string]float64{}
	for _, r := range doc.Bench.Results {
		n := len(want)
		if r["contention"] == "while1" {
			n++ // corunner_cpu_share: the co-runner's CPU share in the cell
			if c, ok := r["corunner_cpu_share"].(float64); !ok || c <= 0 || c > 1.05 {
				t.Errorf("while1 row: corunner_cpu_share %v, want a share of one CPU (0, 1]", r["corunner_cpu_share"])
			}
		}
		if len(r) != n {
			t.Errorf("row has %d fields, want %d: %v", len(r), n, r)
		}
		for _, k := range want {
			if _, ok := r[k]; !ok {
				t.Errorf("row lacks %q: %v", k, r)
			}
		}
		wall[r["contention"].(string)+"/"+r["mode"].(string)] = r["wall_s"].(float64)
	}
	if len(doc.Bench.Results) != 3*len(bytes.Split([]byte(contention), []byte(","))) {
		t.Fatalf("%d rows", len(doc.Bench.Results))
	}
	var misses []string
	if wall["while1/spin"] < 1.2*wall["none/spin"] {
		misses = append(misses, fmt.Sprintf("spin with a busy co-runner %.3f s, alone %.3f s: the co-runner did not contend", wall["while1/spin"], wall["none/spin"]))
	}
	// The results document holds the same cells, with their slowdown
	// against the fastest mode alone.
	f, err := results.Read(filepath.Join(dir, results.Name))
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind != results.KindBench || len(f.Cells) != len(doc.Bench.Results) {
		t.Fatalf("results.json: kind %q, %d cells, want bench and %d", f.Kind, len(f.Cells), len(doc.Bench.Results))
	}
	fastest := math.Inf(1)
	for _, c := range f.Cells {
		if w := wall[c.Scenario+"/"+c.Mode]; c.Median.WallS != w || len(c.Reps) != 1 {
			t.Errorf("cell %+v: wall %v, %d reps; the table says %v", c.Key, c.Median.WallS, len(c.Reps), w)
		}
		if c.Scenario == "none" {
			fastest = min(fastest, c.Median.WallS)
		}
	}
	for _, c := range f.Cells {
		if want := c.Median.WallS / fastest; math.Abs(c.Slowdown-want) > 1e-9 {
			t.Errorf("cell %+v: slowdown %v, want %v", c.Key, c.Slowdown, want)
		}
	}
	disturbed.Check(t, 0.05, misses...)
}
