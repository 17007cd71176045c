package results

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// TestDefaultDir: every command's default directory is under Root, named
// by its kind and the time in UTC, whatever the zone of the time given.
func TestDefaultDir(t *testing.T) {
	at := time.Date(2026, 11, 29, 7, 5, 9, 0, time.FixedZone("CET", 3600))
	for kind, want := range map[string]string{
		KindRun:    "vgpu-probe-results/run-20261129-060509",
		KindBench:  "vgpu-probe-results/bench-20261129-060509",
		KindApps:   "vgpu-probe-results/apps-20261129-060509",
		KindAdvise: "vgpu-probe-results/advise-20261129-060509",
	} {
		if got := DefaultDir(kind, at); got != want {
			t.Errorf("%s: %s, want %s", kind, got, want)
		}
	}
}

// TestOutDir: "" is the default directory, made; a given one is made
// with its parents and kept as given.
func TestOutDir(t *testing.T) {
	t.Chdir(t.TempDir())
	now := time.Now()
	dir, err := OutDir("", KindBench, now)
	if err != nil || dir != DefaultDir(KindBench, now) {
		t.Fatalf("OutDir: %q, %v", dir, err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("%s not made: %v", dir, err)
	}
	given := filepath.Join("a", "b", "c")
	if dir, err := OutDir(given, KindRun, now); err != nil || dir != given {
		t.Errorf("OutDir(%q): %q, %v", given, dir, err)
	}
	if _, err := os.Stat(given); err != nil {
		t.Error(err)
	}
}

// TestEncodeIsTheFile: --json prints what WriteDoc writes, the command's
// parts included, and it reads back as the one document type.
func TestEncodeIsTheFile(t *testing.T) {
	f := &File{Kind: KindApps, Created: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), Machine: Machine{CPUs: 2},
		Config: Config{Reps: 1},
		Cells:  []Cell{{Key: Key{Program: "p", Scenario: "none", VCPUs: 1, Mode: "cuda-default"}, Median: Result{WallS: 1}, MinWallS: 1, MaxWallS: 1}},
		Apps:   &apptable.Summary{Runs: []apptable.Run{{Program: "p", Arm: "cuda-default", Contention: "none", WallS: 1}}},
		Bench:  &BenchPart{Rows: []BenchRow{{Contention: "none", Mode: "spin", WallS: 1}}, Interrupted: true}}
	dir := t.TempDir()
	path, err := WriteDoc(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	var printed bytes.Buffer
	if err := Encode(&printed, f); err != nil {
		t.Fatal(err)
	}
	written, _ := os.ReadFile(path)
	if !bytes.Equal(bytes.TrimSpace(printed.Bytes()), bytes.TrimSpace(written)) {
		t.Errorf("--json prints\n%s\nresults.json holds\n%s", printed.Bytes(), written)
	}
	back, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Apps == nil || len(back.Apps.Runs) != 1 || back.Bench == nil || !back.Bench.Interrupted || back.Bench.Rows[0].Mode != "spin" {
		t.Errorf("parts lost: %+v", back)
	}
	if err := WriteJSON(filepath.Join(dir, "side.json"), map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	var side map[string]int
	if b, _ := os.ReadFile(filepath.Join(dir, "side.json")); json.Unmarshal(b, &side) != nil || side["a"] != 1 {
		t.Errorf("side file %s", b)
	}
}

// TestOneWriter: no command makes its own default output directory or
// dates it its own way: outside this package no Go file of the tree
// names the time layout of DefaultDir and Stamp, joins a path under
// Root, or looks up $XDG_STATE_HOME.
func TestOneWriter(t *testing.T) {
	banned := []string{`"20060102-150405"`, `Join("` + Root + `"`, `"XDG_STATE_HOME"`}
	root := ".."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "build", "node_modules", "testdata":
				return filepath.SkipDir
			}
			if path == filepath.Join(root, "results") {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range banned {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s has %s: output directories and their names are results.OutDir's, DefaultDir's and Stamp's", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
