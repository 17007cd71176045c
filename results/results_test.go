package results

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// samples are the measured results files the profiler's tests use.
var samples = []string{
	filepath.Join("..", "profiler", "testdata", "results.json"),
	filepath.Join("..", "profiler", "testdata", "results-run.json"),
}

func TestReadAcceptsMeasuredFiles(t *testing.T) {
	for _, p := range samples {
		f, err := Read(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(f.Cells) == 0 {
			t.Errorf("%s: no cells", p)
		}
	}
}

// good is a small valid file; each case below spoils one field.
func good() *File {
	cell := func(scenario string, wall, slowdown float64) Cell {
		return Cell{Key: Key{Scenario: scenario, VCPUs: 1, Mode: "spin"}, Median: resultOf(wall),
			Reps: []Result{resultOf(wall)}, MinWallS: wall, MaxWallS: wall, KernelsPerS: 600 / wall, Slowdown: slowdown}
	}
	return &File{Version: Version, Config: Config{Reps: 1, Steps: 600, HostUS: 200, KernelUS: 500},
		Cells: []Cell{cell("baseline", 0.4, 1), cell("shared1", 0.8, 2)}}
}

func resultOf(wall float64) Result {
	return Result{WallS: wall, CPUS: wall / 2, Steps: 600, LaunchP50US: 1, LaunchP99US: 5, ReceiveP50US: 3, ReceiveP99US: 80}
}

func TestParseRejectsImpossibleValues(t *testing.T) {
	for _, tc := range []struct {
		field string
		spoil func(*File)
	}{
		{"cells[1].median.wall_s", func(f *File) { f.Cells[1].Median.WallS = -3 }},
		{"cells[1].median.wall_s", func(f *File) { f.Cells[1].Median.WallS = 0 }},
		{"cells[1].median.wall_s", func(f *File) { f.Cells[1].Median.WallS = 1e308 }},
		{"cells[0].reps[0].wall_s", func(f *File) { f.Cells[0].Reps[0].WallS = -0.1 }},
		{"cells[1].median.cpu_s", func(f *File) { f.Cells[1].Median.CPUS = -1 }},
		{"cells[1].median.receive_p99_us", func(f *File) { f.Cells[1].Median.ReceiveP99US = -5 }},
		{"cells[1].median.launch_p50_us", func(f *File) { f.Cells[1].Median.LaunchP50US = 1e300 }},
		{"cells[1].median.steps", func(f *File) { f.Cells[1].Median.Steps = -1 }},
		{"cells[1].slowdown", func(f *File) { f.Cells[1].Slowdown = -3 }},
		{"cells[1].slowdown", func(f *File) { f.Cells[1].Slowdown = 1e308 }},
		{"cells[1].min_wall_s", func(f *File) { f.Cells[1].MinWallS = 0 }},
		{"cells[1]: min_wall_s", func(f *File) { f.Cells[1].MinWallS = 2 }},
		{"cells[0].kernels_per_s", func(f *File) { f.Cells[0].KernelsPerS = -1 }},
		{"cells[0].quota_cpus", func(f *File) { f.Cells[0].QuotaCPUs = -0.5 }},
		{"cells[0].agent_wall_s", func(f *File) { f.Cells[0].AgentWallS = -1 }},
		{"cells[0].runner_vcpus", func(f *File) { f.Cells[0].RunnerVCPUs = -2 }},
		{"config.kernel_us", func(f *File) { f.Config.KernelUS = -500 }},
		{"config.reps", func(f *File) { f.Config.Reps = -1 }},
		{"machine.cpus", func(f *File) { f.Machine.CPUs = -4 }},
		// What a run that failed before its first cell would have left.
		{"no cells", func(f *File) { f.Cells = nil }},
	} {
		f := good()
		tc.spoil(f)
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse("r.json", b)
		if err == nil {
			t.Errorf("%s: spoilt file accepted", tc.field)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "r.json: "+tc.field) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q is not one line naming the file and the field", tc.field, msg)
		}
	}
	b, _ := json.Marshal(good())
	if _, err := Parse("r.json", b); err != nil {
		t.Fatalf("the unspoilt file: %v", err)
	}
}

func TestParseRejectsWhatIsNotAResultsFile(t *testing.T) {
	b, _ := os.ReadFile(samples[0])
	if _, err := Parse("r.json", b[:len(b)/2]); err == nil {
		t.Error("truncated file accepted")
	}
	if _, err := Parse("r.json", []byte(`{"version":9}`)); !errors.Is(err, ErrNewerVersion) {
		t.Errorf("newer version: %v", err)
	}
	if _, err := Parse("r.json", []byte(`{"cells":[]}`)); err == nil {
		t.Error("file without a version accepted")
	}
	// JSON has no NaN or infinity, and a number past float64's range is
	// a decoding error, so a non-finite time cannot get in.
	if _, err := Parse("r.json", []byte(`{"version":1,"cells":[{"median":{"wall_s":1e400}}]}`)); err == nil {
		t.Error("1e400 accepted")
	}
}

func TestReadRefusesAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "results.json")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	// Without the check, Read would block here for a writer forever:
	// the test binary's -timeout bounds it.
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("FIFO: %v", err)
	}
}

// FuzzParse feeds arbitrary bytes to the results loader: it never
// panics, and what it accepts holds only times that are times, so a
// report never prints a negative or 309-digit figure from it.
func FuzzParse(f *testing.F) {
	for _, p := range samples {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	g, _ := json.Marshal(good())
	f.Add(g)
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("fuzz.json", b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on several lines: %q", err)
			}
			return
		}
		for i, c := range file.Cells {
			for _, v := range []float64{c.Median.WallS, c.MinWallS, c.MaxWallS} {
				if !(v > 0) || math.IsInf(v, 0) || v > 1e9 {
					t.Fatalf("cells[%d]: wall time %g accepted", i, v)
				}
			}
			if !(c.Slowdown >= 0) || c.Slowdown > 1e6 {
				t.Fatalf("cells[%d]: slowdown %g accepted", i, c.Slowdown)
			}
		}
		// What was accepted survives a round trip.
		again, err := json.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse("fuzz.json", again); err != nil {
			t.Fatalf("re-encoded file refused: %v", err)
		}
	})
}

// A setting with a busy loops' pattern is its setting and how the loops
// come and go; every pattern apps knows has words; an unknown name none.
func TestScenarioDoc(t *testing.T) {
	if got := ScenarioDoc("while1-1s"); got != "a busy-loop co-runner pinned to each of the program's CPUs, on for 1 s, off for 1 s, from the start" {
		t.Errorf("while1-1s: %q", got)
	}
	for _, p := range apptable.Patterns {
		if d := ScenarioDoc("while1-" + p); !strings.HasPrefix(d, ScenarioDoc("while1")+", ") || strings.HasSuffix(d, ", ") {
			t.Errorf("pattern %s: %q", p, d)
		}
	}
	if ScenarioDoc("bogus") != "" || ScenarioDoc("bogus-1s") != "" {
		t.Error("an unknown name has words")
	}
}
