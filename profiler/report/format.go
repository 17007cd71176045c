package report

import "fmt"

// NotMeasured is what a table shows in a cell whose quantity no run
// recorded, where other cells of its column have one: never a 0.
const NotMeasured = "not measured"

// Column is an optional column of the cells' table: shown only where
// some cell measured it (MeasuredColumns).
type Column struct {
	Name string
	// Has says whether cell c measured it.
	Has func(c Cell) bool
	// Text is c's value as tables print it; ref is the reference
	// scenario, whose cells have no utilisation drop ("-").
	Text func(c Cell, ref string) string
}

// columns are the optional columns, in table order.
var columns = []Column{
	{"kernels/s", func(c Cell) bool { return c.KernelsPerS > 0 },
		func(c Cell, _ string) string { return fmt.Sprintf("%.0f", c.KernelsPerS) }},
	{"GPU util", func(c Cell) bool { return c.GPUUtil > 0 },
		func(c Cell, _ string) string { return fmt.Sprintf("%.0f%%", 100*c.GPUUtil) }},
	{"util drop", func(c Cell) bool { return c.GPUUtilDrop != nil }, utilDrop},
	{"launch p50", func(c Cell) bool { return c.LaunchP50US != nil }, func(c Cell, _ string) string { return FormatUSp(c.LaunchP50US) }},
	{"launch p99", func(c Cell) bool { return c.LaunchP99US != nil }, func(c Cell, _ string) string { return FormatUSp(c.LaunchP99US) }},
	{"recv p50", func(c Cell) bool { return c.ReceiveP50US != nil }, func(c Cell, _ string) string { return FormatUSp(c.ReceiveP50US) }},
	{"recv p99", func(c Cell) bool { return c.ReceiveP99US != nil }, func(c Cell, _ string) string { return FormatUSp(c.ReceiveP99US) }},
}

// utilDrop is "-" in the reference scenario and where the utilisation
// was measured with no reference cell to compare; NotMeasured where the
// utilisation itself was not.
func utilDrop(c Cell, ref string) string {
	switch {
	case c.GPUUtilDrop != nil:
		return fmt.Sprintf("%.0f%%", 100**c.GPUUtilDrop)
	case c.Scenario == ref || c.GPUUtil > 0:
		return "-"
	}
	return NotMeasured
}

// MeasuredColumns are the optional columns that at least one of cells
// measured: a column no run recorded is left out of the table, and a
// cell without a value in a column shown says NotMeasured.
func MeasuredColumns(cells []Cell) []Column {
	var out []Column
	for _, col := range columns {
		for _, c := range cells {
			if col.Has(c) {
				out = append(out, col)
				break
			}
		}
	}
	return out
}

// FormatUSp is FormatUS of a latency that may not have been measured.
func FormatUSp(us *float64) string {
	if us == nil {
		return NotMeasured
	}
	return fmtUS(*us)
}

// Pair is a p50 / p99 pair, "(NotMeasured)" where neither was measured.
func Pair(p50, p99 *float64) string {
	if p50 == nil && p99 == nil {
		return "(" + NotMeasured + ")"
	}
	return "(" + FormatUSp(p50) + " / " + FormatUSp(p99) + ")"
}

// Latency is a Table II entry: its class, where judged, then p50 / p99.
func Latency(class string, p50, p99 *float64) string {
	if p50 == nil && p99 == nil {
		return NotMeasured
	}
	s := FormatUSp(p50) + " / " + FormatUSp(p99)
	if class != "" {
		s = class + ": " + s
	}
	return s
}

// VerdictWord is the verdict in one word or two: "VULNERABLE", "not
// vulnerable", or "not judged" where sync intensity was not measured.
func VerdictWord(v Verdict) string {
	switch {
	case !v.Judged():
		return "not judged"
	case v.IsVulnerable():
		return "VULNERABLE"
	}
	return "not vulnerable"
}
