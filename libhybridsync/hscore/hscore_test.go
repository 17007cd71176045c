package hscore

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// TestLogLevelsAgree: the level the Go side validates and the one the C
// core parses (HYBRIDSYNC_LOG at load, and hs_set_log_level's numbers)
// come from two lists, one per language; they must be the same list.
func TestLogLevelsAgree(t *testing.T) {
	if c, g := LogLevels(), hybridsync.LogLevels[:]; !slices.Equal(c, g) {
		t.Errorf("C log levels %q, Go's %q", c, g)
	}
}

// TestWriteStats: %p is this process's pid, the file holds the document
// and a newline, and nothing else is left in its directory.
func TestWriteStats(t *testing.T) {
	dir := t.TempDir()
	if err := WriteStats(filepath.Join(dir, "s-%p.json"), []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, fmt.Sprintf("s-%d.json", os.Getpid()))
	b, err := os.ReadFile(want)
	if err != nil || string(b) != "{\"a\":1}\n" {
		t.Errorf("%s: %q, %v", want, b, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in %s, want the stats file alone", len(ents), dir)
	}
	if err := WriteStats(filepath.Join(dir, "missing", "s.json"), nil); err == nil {
		t.Error("a file in a missing directory: no error")
	}
}
