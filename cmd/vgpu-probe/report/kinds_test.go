package report

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// envStandin makes this test binary the GPU program that `apps` runs
// (TestMain): a loop of CPU work that prints the one JSON result line.
const envStandin = "VGPU_PROBE_REPORT_STANDIN"

func TestMain(m *testing.M) {
	if os.Getenv(envStandin) != "" {
		os.Exit(standin())
	}
	os.Exit(m.Run())
}

var sink uint64

// standin does 200 steps of about 0.5 ms of CPU work each and prints
// what it measured of itself, as apps' programs do.
func standin() int {
	cpu := func() float64 {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
		return float64(ts.Nano()) / 1e9
	}
	start, c0 := time.Now(), cpu()
	const steps = 200
	for range steps {
		for s := cpu(); cpu()-s < 0.0005; {
			sink++
		}
	}
	fmt.Printf(`{"program":"burn","steps":%d,"wall_s":%g,"cpu_s":%g}`+"\n", steps, time.Since(start).Seconds(), cpu()-c0)
	return 0
}

// TestReportReadsRunBenchAndApps: a results file made by each of the real
// run, bench and apps commands (simulated GPU, a stand-in program, small
// settings), and apps' runs.jsonl, render in text, JSON and HTML, and
// every format shows each cell with the same slowdown, the one the
// results file holds.
func TestReportReadsRunBenchAndApps(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind string
		args []string
		env  []string
	}{
		{results.KindRun, []string{"run", "--scenario", "shared1,baseline", "--vcpus", "1", "--modes", "spin,block",
			"--reps", "2", "--steps", "100", "--timeline-steps", "10"}, nil},
		{results.KindBench, []string{"bench", "--contention", "none,while1", "--modes", "spin,block", "--reps", "2", "--steps", "150"}, nil},
		{results.KindApps, []string{"apps", "--program", "burn=" + self, "--arms", "cuda-default", "--contention", "none,while1", "--reps", "2"},
			[]string{envStandin + "=1"}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			out := filepath.Join(dir, tc.kind)
			cmd := exec.Command(bin, append(tc.args, "--out", out)...)
			cmd.Env = append(os.Environ(), tc.env...)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", tc.kind, err, b)
			}
			path := filepath.Join(out, results.Name)
			f, err := results.Read(path)
			if err != nil {
				t.Fatal(err)
			}
			if f.Kind != tc.kind || len(f.Cells) < 2 {
				t.Fatalf("%s: kind %q, %d cells", path, f.Kind, len(f.Cells))
			}
			checkSameSlowdowns(t, path, f)
			if tc.kind == results.KindApps {
				// apps' raw log reports as its results document does.
				checkSameSlowdowns(t, filepath.Join(out, "runs.jsonl"), f)
			}
		})
	}
}

// TestSameSlowdownEveryFormat: the committed sample results, which an
// older build wrote with per-mode slowdowns, read the same in every
// format: the report's one definition, not the file's field.
func TestSameSlowdownEveryFormat(t *testing.T) {
	path := filepath.Join(testdata, "results.json")
	f, err := results.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	checkSameSlowdowns(t, path, f)
}

// checkSameSlowdowns renders the results file at path in text, JSON and
// HTML and checks that each shows every cell of f once, with one
// slowdown: JSON's (the model's) to the last digit, the text's and the
// HTML's as they print it.
func checkSameSlowdowns(t *testing.T, path string, f *results.File) {
	t.Helper()
	render := func(format string) string {
		out, err := runCmd(t, path, "--format", format)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		return out
	}
	var doc struct {
		Experiments []struct {
			Reference string `json:"reference"`
			Verdict   struct {
				WorstSlowdown float64 `json:"worst_slowdown"`
				Why           string  `json:"why"`
			} `json:"verdict"`
			Cells []struct {
				results.Key
				Slowdown float64 `json:"slowdown"`
			} `json:"cells"`
		} `json:"experiments"`
	}
	if err := json.Unmarshal([]byte(render("json")), &doc); err != nil || len(doc.Experiments) != 1 {
		t.Fatalf("json: %v, %d experiments", err, len(doc.Experiments))
	}
	e := doc.Experiments[0]
	if e.Reference != f.Reference() || len(e.Cells) != len(f.Cells) {
		t.Fatalf("json: reference %q, %d cells; the file: %q, %d cells", e.Reference, len(e.Cells), f.Reference(), len(f.Cells))
	}
	text, page := render("text"), render("html")
	textRow := regexp.MustCompile(`(?m)^(\S.*?)\s{2,}[0-9.]+\s+([0-9.]+x|-)\*?\s`)
	htmlRow := regexp.MustCompile(`<tr><td class="l">([^<]*)</td><td>[^<]*</td><td>[^<]*</td><td class="slowdown">([^<*]*)\*?</td>`)
	inText, inHTML := map[string]string{}, map[string]string{}
	for _, m := range textRow.FindAllStringSubmatch(text, -1) {
		inText[m[1]] = m[2]
	}
	for _, m := range htmlRow.FindAllStringSubmatch(page, -1) {
		inHTML[html.UnescapeString(m[1])] = m[2]
	}
	for i, c := range e.Cells {
		if c.Key != f.Cells[i].Key {
			t.Fatalf("json cell %d is %+v, the file's %+v", i, c.Key, f.Cells[i].Key)
		}
		if f.Kind != "" && c.Slowdown != f.Cells[i].Slowdown {
			t.Errorf("%+v: report %v, the file written by %s %v", c.Key, c.Slowdown, f.Kind, f.Cells[i].Slowdown)
		}
		if c.Key.Scenario != e.Reference && c.Slowdown <= 0 {
			t.Errorf("%+v: no slowdown", c.Key)
		}
		label := compare.Label(c.Key)
		want := "-"
		if c.Slowdown > 0 {
			want = fmt.Sprintf("%.2f", c.Slowdown)
		}
		if got, ok := inText[label]; !ok || strings.TrimSuffix(got, "x") != want {
			t.Errorf("%s: text shows %q (found %v), json %s", label, got, ok, want)
		}
		if want == "-" {
			want = "–"
		}
		if got, ok := inHTML[label]; !ok || strings.TrimSuffix(got, "×") != want {
			t.Errorf("%s: html shows %q (found %v), json %s", label, got, ok, want)
		}
	}
	// The verdict's worst slowdown is the worst shared cell's, and every
	// format gives the same verdict.
	worst := 0.0
	for _, c := range e.Cells {
		if c.Key.Scenario != e.Reference {
			worst = max(worst, c.Slowdown)
		}
	}
	if e.Verdict.WorstSlowdown != worst {
		t.Errorf("verdict's worst slowdown %v, the cells' %v", e.Verdict.WorstSlowdown, worst)
	}
	if !strings.Contains(text, e.Verdict.Why) || !strings.Contains(html.UnescapeString(page), e.Verdict.Why) {
		t.Errorf("verdict %q not in the text and the HTML", e.Verdict.Why)
	}
	if t.Failed() {
		t.Logf("text:\n%s", text)
	}
}

// FuzzParseRuns: whatever the bytes, a results input read as apps'
// runs.jsonl is refused with an error or is a results file whose every
// cell has a measured time and a slowdown within the checked range.
func FuzzParseRuns(f *testing.F) {
	f.Add([]byte(`{"program":"p","arm":"cuda-default","contention":"none","rep":0,"steps":10,"wall_s":0.5,"cpu_s":0.4,"start":"2026-11-26T21:47:38Z"}
{"program":"p","arm":"cuda-default","contention":"while1","rep":0,"steps":5,"wall_s":0.5,"cpu_s":0.2}`))
	f.Add([]byte(`{"program":"p","arm":"hybridsync","contention":"none","wall_s":-1}`))
	f.Add([]byte(`{"program":"p","arm":"x","contention":"cap","steps":-3,"wall_s":1e308,"error":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := parseResults("fuzz.jsonl", b)
		if err != nil {
			return
		}
		for _, c := range in.File.Cells {
			if !(c.Median.WallS > 0) || !(c.Slowdown >= 0) {
				t.Fatalf("cell %+v: wall %v, slowdown %v", c.Key, c.Median.WallS, c.Slowdown)
			}
		}
	})
}
