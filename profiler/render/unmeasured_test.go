package render_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/profiler/render/html"
	jsonr "github.com/vgpu-probe/vgpu-probe/profiler/render/json"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/text"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// unmeasuredFiles are results files whose cells leave out what their
// commands never measure, as written: apps' (programs timed whole: no
// device, steps, kernels or latencies) and run's with --workload-cmd (a
// command: no steps, kernels or latencies), each with a setting whose
// reference is missing (no slowdown).
func unmeasuredFiles() []report.ResultsInput {
	created := time.Date(2026, 11, 29, 5, 49, 54, 0, time.UTC)
	apps := &results.File{Version: results.Version, Kind: results.KindApps, Created: created,
		Machine: results.Machine{Hostname: "vm", CPUs: 2, Kernel: "6.1"},
		Config: results.Config{Backend: "local", Scenarios: []string{"none", "while1"}, Corunner: "while1", Corunners: []int{1},
			VCPUs: []int{1}, Modes: []string{"cuda-default", "cuda-default-again"}, Workload: "nap", Reps: 2, PerStep: true}}
	run := &results.File{Version: results.Version, Kind: results.KindRun, Created: created,
		Machine: results.Machine{Hostname: "vm", CPUs: 2, Kernel: "6.1"},
		Config: results.Config{Backend: "local", Scenarios: []string{"shared1", "baseline"}, Corunner: "while1", Corunners: []int{1},
			VCPUs: []int{1, 2}, Modes: []string{"block", "hybrid"}, Workload: "./app", Reps: 2}}
	add := func(f *results.File, k results.Key, steps int, walls ...float64) {
		c := results.Cell{Key: k, RunnerVCPUs: max(1, k.VCPUs/2), MinWallS: 1e9}
		for _, w := range walls {
			if k.Mode == f.Config.Modes[1] {
				w *= 1.08 // the second mode 8% slower
			}
			c.Reps = append(c.Reps, results.Result{WallS: w, CPUS: w / 10, Steps: steps})
			c.MinWallS, c.MaxWallS = min(c.MinWallS, w), max(c.MaxWallS, w)
		}
		c.Median = c.Reps[len(c.Reps)/2]
		f.Cells = append(f.Cells, c)
	}
	for _, m := range apps.Config.Modes {
		// A program that prints its steps, and one timed whole (0 steps).
		add(apps, results.Key{Program: "torch", Scenario: "none", VCPUs: 1, Mode: m}, 500, 1.0, 1.1)
		add(apps, results.Key{Program: "torch", Scenario: "while1", Corunner: "while1", Corunners: 1, VCPUs: 1, Mode: m}, 400, 1.3, 1.2)
		add(apps, results.Key{Program: "nap", Scenario: "while1", Corunner: "while1", Corunners: 1, VCPUs: 1, Mode: m}, 0, 0.21, 0.22)
	}
	for _, m := range run.Config.Modes {
		add(run, results.Key{Scenario: "baseline", VCPUs: 1, Mode: m}, 0, 1.0, 1.05)
		add(run, results.Key{Scenario: "shared1", Corunner: "while1", Corunners: 1, VCPUs: 1, Mode: m}, 0, 1.5, 1.6)
		add(run, results.Key{Scenario: "shared1", Corunner: "while1", Corunners: 1, VCPUs: 2, Mode: m}, 0, 1.9, 2.0)
	}
	var out []report.ResultsInput
	for name, f := range map[string]*results.File{"apps.json": apps, "run-cmd.json": run} {
		// Through the file format and back, as report reads it.
		b, err := json.Marshal(f)
		if err != nil {
			panic(err)
		}
		g, err := results.Parse(name, b)
		if err != nil {
			panic(err)
		}
		out = append(out, report.ResultsInput{Path: name, File: g})
	}
	return out
}

// zeroWord is a printed zero standing for a quantity: "0", "0.0", "0%",
// "0 µs", "0.00x", "0 steps", "0 kernels/s" as a word of its own.
var zeroWord = regexp.MustCompile(`(^|[\s(:=])(0(\.0+)?)(%|x|×| µs| ms| steps| kernels/s| step cycle)?([\s,;)]|\.(\s|$)|$)`)

// TestNoZeroForUnmeasured renders files whose cells did not measure
// kernels, latencies, steps or (in one setting) a slowdown, in text, JSON
// and HTML: none may print a zero (or an empty field) for them. JSON
// leaves them out; tables leave out a column no cell measured; the
// verdict says what it could not judge.
func TestNoZeroForUnmeasured(t *testing.T) {
	if zeroWord.FindString("kernels/s 0 GPU") == "" || zeroWord.FindString("against a 0 step cycle") == "" || zeroWord.FindString("0.206s") != "" {
		t.Fatal("zeroWord does not tell a printed zero from a number")
	}
	in := report.Inputs{Results: unmeasuredFiles(), Now: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)}
	r, err := report.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	render := func(f func(io.Writer, *report.Report) error) string {
		var b bytes.Buffer
		if err := f(&b, r); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	txt := render(text.Render)
	for i, l := range strings.Split(txt, "\n") {
		if m := zeroWord.FindString(l); m != "" {
			t.Errorf("text line %d prints a zero (%q): %s", i+1, strings.TrimSpace(m), l)
		}
		if strings.Contains(l, "device )") || strings.Contains(l, "unknown:") {
			t.Errorf("text line %d shows an empty or unknown field: %s", i+1, l)
		}
	}
	if !strings.Contains(txt, "not judged") || strings.Contains(txt, "kernels/s") || strings.Contains(txt, "Latency (Table II)") {
		t.Errorf("text: want the verdict not judged and no kernel or latency figures:\n%s", txt)
	}
	page := render(html.Render)
	// Plots' axes have their 0; the page's text must not.
	words := regexp.MustCompile(`(?s)<svg.*?</svg>|<style>.*?</style>|<[^>]+>`).ReplaceAllString(page, "\n")
	for _, l := range strings.Split(words, "\n") {
		if m := zeroWord.FindString(l); m != "" {
			t.Errorf("html prints a zero (%q): %s", strings.TrimSpace(m), l)
		}
	}
	if strings.Contains(page, "kernels/s") || strings.Contains(page, `id="e1-gpu-util"`) || strings.Contains(page, `id="e2-gpu-util"`) {
		t.Errorf("html: a kernel rate or a GPU utilisation plot nobody measured")
	}
	var doc any
	if err := json.Unmarshal([]byte(render(jsonr.Render)), &doc); err != nil {
		t.Fatal(err)
	}
	for _, bad := range zeroFields(doc, "") {
		t.Errorf("json: %s", bad)
	}
}

// measuredKeys are the report JSON's fields that hold a measurement (or
// a judgement from one): none may be 0, "" or false where nothing was
// measured. Key fields (corunners: how many there were) are not.
var measuredKeys = map[string]bool{"kernels_per_s": true, "gpu_util": true, "gpu_util_drop": true, "launch_p50_us": true,
	"launch_p99_us": true, "receive_p50_us": true, "receive_p99_us": true, "slowdown": true, "steps": true, "device": true,
	"cycle_us": true, "worst_slowdown": true, "syncs_per_kernel": true, "best_mode_margin": true, "sync_intensive": true,
	"vulnerable": true, "launch_baseline_p50_us": true, "launch_baseline_p99_us": true, "receive_baseline_p50_us": true,
	"receive_baseline_p99_us": true, "launch_class": true, "receive_class": true}

func zeroFields(v any, at string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if measuredKeys[k] && (e == nil || e == 0.0 || e == "" || e == false) {
				out = append(out, fmt.Sprintf("%s.%s = %v", at, k, e))
			}
			out = append(out, zeroFields(e, at+"."+k)...)
		}
	case []any:
		for i, e := range x {
			out = append(out, zeroFields(e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	}
	return out
}
