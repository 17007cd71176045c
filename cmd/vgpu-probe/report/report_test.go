package report

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

var testdata = filepath.Join("..", "..", "..", "profiler", "testdata")

func TestNewCmdFlags(t *testing.T) {
	for _, tc := range []struct {
		args    string
		want    Options
		wantErr string
	}{
		{args: "r.json", want: Options{Results: []string{"r.json"}, Format: "text", Timeline: 5}},
		{args: "a.json b.json --format html -o out.html --stats s.json --stats t.json --nvml n.json",
			want: Options{Results: []string{"a.json", "b.json"}, Format: "html", Output: "out.html", Stats: []string{"s.json", "t.json"}, NVML: []string{"n.json"}, Timeline: 5}},
		{args: "--agent http://h1:9477 --agent http://h2:9477 --format perfetto --timeline 0",
			want: Options{Agents: []string{"http://h1:9477", "http://h2:9477"}, Format: "perfetto"}},
		{args: "r.json --format pdf", wantErr: `--format "pdf"`},
		{args: "", wantErr: "nothing to report"},
		{args: "--agent h1:9477", wantErr: "want http://HOST:PORT"},
		{args: "r.json --timeline -1", wantErr: "--timeline"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var got *Options
			cmd := NewCmd(func(_ context.Context, o *Options) error { got = o; return nil })
			args := strings.Fields(tc.args)
			cmd.SetArgs(args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, usage.ErrBadInput) {
					t.Fatalf("err = %v, want bad input containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got.Results, ",") != strings.Join(tc.want.Results, ",") || got.Format != tc.want.Format ||
				got.Output != tc.want.Output || strings.Join(got.Stats, ",") != strings.Join(tc.want.Stats, ",") ||
				strings.Join(got.NVML, ",") != strings.Join(tc.want.NVML, ",") || strings.Join(got.Agents, ",") != strings.Join(tc.want.Agents, ",") ||
				got.Timeline != tc.want.Timeline {
				t.Errorf("options = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// runCmd runs the real command with args; it returns stdout and the error.
func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewCmd(nil)
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestReportResultsEveryFormat(t *testing.T) {
	res := filepath.Join(testdata, "results.json")
	out, err := runCmd(t, res, "--stats", filepath.Join(testdata, "hybridsync-stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Latency (Table II)", "Verdict:", "hybridsync stats", "shared1 1 vCPU 1 x while1 spin"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	dir := t.TempDir()
	for _, f := range Formats() {
		path := filepath.Join(dir, "report."+f)
		if _, err := runCmd(t, res, "--format", f, "-o", path); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() < 500 {
			t.Errorf("%s: output %v, %v", f, st, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(Formats()) {
		t.Errorf("left in the output dir: %d entries, want %d (no temp files)", len(entries), len(Formats()))
	}
}

// TestBadInputIsOneLineExit2NoOutput: truncated, corrupt, newer-version
// and missing inputs and an agent that does not answer all give one line
// of error marked as bad input (main exits 2) and leave no output file,
// not even where one existed before.
func TestBadInputIsOneLineExit2NoOutput(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(filepath.Join(testdata, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	truncated := write("truncated.json", good[:len(good)/2])
	corrupt := write("corrupt.json", []byte("{\"version\": 1, \"cells\": [}\x00"))
	newer := write("newer.json", bytes.Replace(good, []byte(`"version": 1`), []byte(`"version": 7`), 1))
	stats := write("stats.json", []byte(`{"version": 1, "mode": `))
	nvmlFile := write("nvml.json", []byte(`{"version": 3, "samples": []}`))
	// An address nothing listens on: bind, note the port, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	notAgent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "404 page not found", http.StatusNotFound)
	}))
	defer notAgent.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>hello")) }))
	defer garbage.Close()

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"truncated", []string{truncated}, "not a results file"},
		{"corrupt", []string{corrupt}, "not a results file"},
		{"newer version", []string{newer}, "newer vgpu-probe"},
		{"missing", []string{filepath.Join(dir, "absent.json")}, "no such file"},
		{"bad stats", []string{"--stats", stats}, "not a hybridsync stats file"},
		{"newer nvml", []string{"--nvml", nvmlFile}, "newer vgpu-probe"},
		{"dead agent", []string{"--agent", dead}, "does not answer"},
		{"not an agent", []string{"--agent", notAgent.URL}, "404"},
		{"garbage agent", []string{"--agent", garbage.URL}, "not an agent snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+strings.ReplaceAll(tc.name, " ", "-")+".html")
			_, err := runCmd(t, append(tc.args, "--format", "html", "-o", out, "--timeout", "2s")...)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, usage.ErrBadInput) {
				t.Errorf("err %q not marked bad input (exit 2)", err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q, want one line containing %q", err, tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("output file left behind: %v", err)
			}
		})
	}
	// A failed report never replaces a good one already written.
	prev := write("prev.txt", []byte("previous report\n"))
	if _, err := runCmd(t, truncated, "-o", prev); err == nil {
		t.Fatal("no error")
	}
	if b, _ := os.ReadFile(prev); string(b) != "previous report\n" {
		t.Errorf("previous output clobbered: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

// fakeAgent serves the committed real agent snapshot and timelines the
// way /api/v1 does.
func fakeAgent(t *testing.T, rename string) *httptest.Server {
	t.Helper()
	snap, err := os.ReadFile(filepath.Join(testdata, "agent-snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rename != "" {
		snap = bytes.ReplaceAll(snap, []byte(`"name": "`), []byte(`"name": "`+rename))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/snapshot", func(w http.ResponseWriter, r *http.Request) { w.Write(snap) })
	mux.HandleFunc("GET /api/v1/timeline", func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Query().Get("domain"), rename)
		b, err := os.ReadFile(filepath.Join(testdata, "agent-timeline-"+name+".json"))
		if err != nil {
			http.Error(w, "unknown target", http.StatusNotFound)
			return
		}
		w.Write(b)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestReportLiveAgents(t *testing.T) {
	a, b := fakeAgent(t, "hostA-"), fakeAgent(t, "hostB-")
	out, err := runCmd(t, "--agent", a.URL, "--agent", b.URL)
	if err != nil {
		t.Fatal(err)
	}
	// On both hosts: the busy loop and the sync-like loop sharing a CPU
	// (23% and 5% waited): bandwidth control; the loop alone: nothing.
	if !strings.Contains(out, "VMs ranked by interference") || strings.Count(out, "enable CPU bandwidth control") != 8 ||
		strings.Count(out, "nothing to do") != 4 {
		t.Errorf("ranking missing:\n%s", out)
	}
	// The two most interfered-with VMs, one per host, come first.
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "#  VM") {
			if !strings.Contains(lines[i+1], "1871") || !strings.Contains(lines[i+2], "1871") {
				t.Errorf("ranking order:\n%s\n%s", lines[i+1], lines[i+2])
			}
		}
	}
	trace := filepath.Join(t.TempDir(), "trace.json")
	if _, err := runCmd(t, "--agent", a.URL, "--format", "perfetto", "-o", trace); err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(trace)
	if !bytes.Contains(b2, []byte(`"ran_instead"`)) || !bytes.Contains(b2, []byte("(agent)")) {
		t.Error("perfetto trace lacks the agent timelines")
	}
}

// TestReportFindsRunGPUSamples: the NVML samples `vgpu-probe run` writes
// beside results.json are part of the report without a --nvml flag.
func TestReportFindsRunGPUSamples(t *testing.T) {
	dir := t.TempDir()
	for src, dst := range map[string]string{"results.json": "results.json", "nvml.json": "nvml-20261121-220000.json"} {
		b, err := os.ReadFile(filepath.Join(testdata, src))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, dst), b, 0o644)
	}
	out, err := runCmd(t, filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "GPUs (NVML)") || !strings.Contains(out, "nvml-20261121-220000.json") {
		t.Errorf("report lacks the run's GPU samples:\n%s", out)
	}
}
