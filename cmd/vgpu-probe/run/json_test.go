package run

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/results"
)

// TestJSON: --json prints the results document on stdout, nothing else,
// the same as the results.json it wrote; the path goes to stderr.
func TestJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	stdout, stderr := runWith(t, nil, "--json", "--out", out)
	var doc results.File
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("stdout is not a results document: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Errorf("more than the document on stdout:\n%s", stdout)
	}
	saved, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Version != results.Version || len(doc.Cells) != 1 || doc.Cells[0].Mode != "block" || doc.Cells[0].Median.WallS != saved.Cells[0].Median.WallS {
		t.Errorf("document %+v, want the one block cell of %s", doc, out)
	}
	if !strings.Contains(stderr, "results: "+filepath.Join(out, "results.json")) {
		t.Errorf("stderr %q does not name the results file", stderr)
	}
}
