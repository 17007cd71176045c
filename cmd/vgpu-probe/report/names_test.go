package report

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/runner"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// TestOneNamePerCell: `run`'s table and conclusion and every format of
// `report` name each setting and cell of a run's results file the same
// way. run's rows and bottom line give the settings; report's cells
// (text, HTML, JSON) must be a setting of run's followed by the mode, and
// the settings report names elsewhere (Table II, the verdict, the bottom
// line, the Perfetto trace's processes) must be run's.
func TestOneNamePerCell(t *testing.T) {
	path := filepath.Join("..", "..", "..", "profiler", "testdata", "results-run.json")
	f, err := results.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	var run bytes.Buffer
	if err := runner.PrintTable(&run, f); err != nil {
		t.Fatal(err)
	}
	settings := map[string]bool{}
	lines := strings.Split(run.String(), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "setting ") {
			for _, row := range lines[i+1:] {
				if strings.TrimSpace(row) == "" {
					break
				}
				settings[regexp.MustCompile(`\s{2,}`).Split(row, 2)[0]] = true
			}
		}
	}
	if len(settings) == 0 {
		t.Fatalf("no settings in run's table:\n%s", run.String())
	}
	// run's conclusion: "SETTING: MODE, X% ahead of MODE".
	for _, m := range regexp.MustCompile(`(?:Best mode per setting: |; )([^:;]+): \w+, [0-9.]+% ahead`).FindAllStringSubmatch(run.String(), -1) {
		if !settings[m[1]] {
			t.Errorf("run's bottom line names %q, its table %v", m[1], settings)
		}
	}
	isCell := func(where, name string) {
		t.Helper()
		for _, m := range f.Config.Modes {
			if s, ok := strings.CutSuffix(name, " "+m); ok && settings[s] {
				return
			}
		}
		t.Errorf("%s names a cell %q: not one of run's settings %v and a mode", where, name, settings)
	}
	render := func(format string) string {
		var out bytes.Buffer
		o := &Options{Results: []string{path}, Format: format, Out: &out, Timeout: time.Second}
		if err := o.complete(); err != nil {
			t.Fatal(err)
		}
		if err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	var doc struct {
		Experiments []struct {
			Cells []struct {
				Name string `json:"name"`
			} `json:"cells"`
			Latency *struct {
				Setting string `json:"setting"`
			} `json:"latency"`
			Verdict struct {
				WorstCell string `json:"worst_cell"`
			} `json:"verdict"`
		} `json:"experiments"`
	}
	if err := json.Unmarshal([]byte(render("json")), &doc); err != nil {
		t.Fatal(err)
	}
	e := doc.Experiments[0]
	for _, c := range e.Cells {
		isCell("json cells", c.Name)
	}
	isCell("json verdict", e.Verdict.WorstCell)
	if e.Latency == nil || !settings[e.Latency.Setting] {
		t.Errorf("json Table II's setting %+v is not one of run's %v", e.Latency, settings)
	}
	txt := render("text")
	cells := 0
	for _, m := range regexp.MustCompile(`(?m)^(\S.*?)\s{2,}[0-9.]+\s+[0-9.]+x\*?\s`).FindAllStringSubmatch(txt, -1) {
		isCell("text", m[1])
		cells++
	}
	if cells != len(f.Cells) {
		t.Errorf("text: %d cells found, the file has %d", cells, len(f.Cells))
	}
	if m := regexp.MustCompile(`Latency \(Table II\) under (.*?);`).FindStringSubmatch(txt); m == nil || !settings[m[1]] {
		t.Errorf("text Table II names %v, run %v", m, settings)
	}
	page := render("html")
	cells = 0
	for _, m := range regexp.MustCompile(`<tr><td class="l">([^<]*)</td><td>[0-9.]+</td>`).FindAllStringSubmatch(page, -1) {
		isCell("html", html.UnescapeString(m[1]))
		cells++
	}
	if cells != len(f.Cells) {
		t.Errorf("html: %d cells found, the file has %d", cells, len(f.Cells))
	}
	for _, m := range regexp.MustCompile(`"name":"#\d+ ([^"]*)"`).FindAllStringSubmatch(render("perfetto"), -1) {
		isCell("perfetto", m[1])
	}
}
