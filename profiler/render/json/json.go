// Package json renders a report as indented JSON: the report model's
// summary (cells, Table II, verdicts, ranked VMs, sync and GPU stats),
// versioned by report.Version, without the raw timelines.
package json

import (
	"encoding/json"
	"io"

	"github.com/vgpu-probe/vgpu-probe/profiler/report"
)

// Render writes r as JSON.
func Render(w io.Writer, r *report.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
