package render_test

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/profiler/internal/fixture"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/html"
	jsonr "github.com/vgpu-probe/vgpu-probe/profiler/render/json"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/perfetto"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/text"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in profiler/testdata/golden")

// TestGolden renders the sample inputs in every format and compares with
// the committed output: any change in the model or a renderer shows up as
// a diff to review (go test ./profiler/render -update to accept it).
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		file   string
		render func(io.Writer, *report.Report) error
	}{
		{"report.txt", text.Render},
		{"report.json", jsonr.Render},
		{"report.html", html.Render},
		{"report.perfetto.json", perfetto.Render},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var got bytes.Buffer
			if err := tc.render(&got, fixture.Report(t)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(fixture.Dir(), "golden", tc.file)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./profiler/render -update to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("%s differs from the golden file (%d vs %d bytes) at byte %d:\n got: %q\nwant: %q",
					tc.file, got.Len(), len(want), firstDiff(got.Bytes(), want), excerpt(got.Bytes(), want), excerpt(want, got.Bytes()))
			}
		})
	}
}

// TestDeterministic renders twice: the golden test is only meaningful if
// the same inputs always give the same bytes (map order, float printing).
func TestDeterministic(t *testing.T) {
	for name, render := range map[string]func(io.Writer, *report.Report) error{"html": html.Render, "perfetto": perfetto.Render, "text": text.Render} {
		var a, b bytes.Buffer
		if err := render(&a, fixture.Report(t)); err != nil {
			t.Fatal(err)
		}
		if err := render(&b, fixture.Report(t)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: two renders of the same inputs differ at byte %d", name, firstDiff(a.Bytes(), b.Bytes()))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func excerpt(a, b []byte) string {
	i := firstDiff(a, b)
	lo, hi := max(0, i-60), min(len(a), i+60)
	return string(a[lo:hi])
}
