package render_test

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/nvml"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/profiler/internal/fixture"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/html"
	jsonr "github.com/vgpu-probe/vgpu-probe/profiler/render/json"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/perfetto"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/text"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// FuzzReport feeds arbitrary results, snapshot, timeline and NVML JSON through
// the model and every renderer: whatever a file holds (zero or negative
// times, empty cells, huge values), the report is an error or a page,
// never a panic.
func FuzzReport(f *testing.F) {
	for _, name := range []string{"results-run.json", "results.json"} {
		b, err := os.ReadFile(filepath.Join(fixture.Dir(), name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, []byte(`{"targets":[]}`), []byte(`[]`), []byte(`{"version":1}`))
	}
	snap, _ := os.ReadFile(filepath.Join(fixture.Dir(), "agent-snapshot.json"))
	tl, _ := os.ReadFile(filepath.Join(fixture.Dir(), "agent-timeline-1872.json"))
	nv, _ := os.ReadFile(filepath.Join(fixture.Dir(), "nvml.json"))
	f.Add([]byte(`{"version":1,"cells":[{"scenario":"baseline","mode":"spin","median":{"wall_s":0}},{"scenario":"shared1","mode":"spin","slowdown":-1,"timeline":{"steps":[{"host_start":5,"launch":-9,"complete":-1,"noticed":3}]}}]}`), snap, tl, nv)
	f.Add([]byte(`{"version":1,"config":{"kernel_us":-5},"cells":[{"scenario":"shared2","mode":"block","kernels_per_s":1e308,"timeline":{"threads":[{"name":"corunner","intervals":[{"start":9,"end":1,"on":true}]}]}}]}`), []byte(`{"targets":[{"name":"x","threads":[{"vcpu":0,"steal_fraction":-3}]}]}`), []byte(`{"events":[{"kind":"out","mono_ns":5},{"kind":"in","mono_ns":1}]}`), []byte(`{}`))
	f.Add([]byte(`{"version":1}`), []byte(`{"targets":[{"name":"x"}]}`), []byte(`[{"in_mono_ns":5,"off_us":1e30,"run_us":-4},{"in_mono_ns":18446744073709551615,"off_us":1,"run_us":1e300}]`),
		[]byte(`{"version":1,"devices":[{"index":3}],"samples":[{"gpu":3,"util_pct":7},{"gpu":-1}]}`))
	f.Fuzz(func(t *testing.T, res, snap, tl, nv []byte) {
		var file results.File
		if json.Unmarshal(res, &file) != nil {
			return
		}
		in := report.Inputs{Now: time.Unix(0, 0), Results: []report.ResultsInput{{Path: "r.json", File: &file}}}
		if s, err := agentapi.ParseSnapshot(snap); err == nil {
			a := report.AgentInput{URL: "http://a:1", Snapshot: s, Timelines: map[string][]agentapi.OffCPU{}}
			if evs, err := agentapi.ParseTimeline(tl); err == nil {
				a.Timelines["x"] = evs
			}
			in.Agents = append(in.Agents, a)
		}
		var ser nvml.Series
		if json.Unmarshal(nv, &ser) == nil {
			in.NVML = []report.NVMLInput{{Path: "n.json", Series: &ser}}
		}
		r, err := report.Build(in)
		if err != nil {
			return
		}
		for _, render := range []func(io.Writer, *report.Report) error{text.Render, jsonr.Render, html.Render, perfetto.Render} {
			render(io.Discard, r)
		}
	})
}
