package perfetto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/profiler/internal/fixture"
)

// validate checks a trace against the Trace Event Format (the JSON Object
// Format that ui.perfetto.dev and chrome://tracing load), decoding it
// generically as a consumer would rather than through our own types:
// required fields, known phases, numeric ts/dur, integer pid/tid, counter
// args numeric, metadata named.
func validate(data []byte) error {
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	raw, ok := doc["traceEvents"].([]any)
	if !ok {
		return fmt.Errorf("no traceEvents array")
	}
	if u, ok := doc["displayTimeUnit"]; ok && u != "ms" && u != "ns" {
		return fmt.Errorf("displayTimeUnit %v: want ms or ns", u)
	}
	type span struct{ start, end float64 }
	tracks := map[[2]float64][]span{}
	phases := map[string]bool{"X": true, "B": true, "E": true, "i": true, "I": true, "C": true, "M": true, "s": true, "t": true, "f": true}
	for i, r := range raw {
		e, ok := r.(map[string]any)
		if !ok {
			return fmt.Errorf("event %d: not an object", i)
		}
		ph, _ := e["ph"].(string)
		if !phases[ph] {
			return fmt.Errorf("event %d: ph %q not a trace event phase", i, e["ph"])
		}
		if name, _ := e["name"].(string); name == "" {
			return fmt.Errorf("event %d: no name", i)
		}
		for _, k := range []string{"pid", "tid"} {
			v, ok := e[k].(float64)
			if !ok || v != float64(int64(v)) || v < 0 {
				return fmt.Errorf("event %d: %s %v: want a non-negative integer", i, k, e[k])
			}
		}
		ts, ok := e["ts"].(float64)
		if !ok || ts < 0 {
			return fmt.Errorf("event %d (%v): ts %v: want a non-negative number", i, e["name"], e["ts"])
		}
		args, _ := e["args"].(map[string]any)
		switch ph {
		case "X":
			d, ok := e["dur"].(float64)
			if !ok || d < 0 {
				return fmt.Errorf("event %d (%v): complete event with dur %v", i, e["name"], e["dur"])
			}
			k := [2]float64{e["pid"].(float64), e["tid"].(float64)}
			tracks[k] = append(tracks[k], span{ts, ts + d})
		case "i", "I":
			if s, ok := e["s"]; ok && s != "g" && s != "p" && s != "t" {
				return fmt.Errorf("event %d: instant scope %v", i, s)
			}
		case "C":
			if len(args) == 0 {
				return fmt.Errorf("event %d (%v): counter without args", i, e["name"])
			}
			for k, v := range args {
				if _, ok := v.(float64); !ok {
					return fmt.Errorf("event %d (%v): counter %s = %v not numeric", i, e["name"], k, v)
				}
			}
		case "M":
			switch e["name"] {
			case "process_name", "thread_name":
				if n, _ := args["name"].(string); n == "" {
					return fmt.Errorf("event %d: %v without args.name", i, e["name"])
				}
			case "process_sort_index", "thread_sort_index":
				if _, ok := args["sort_index"].(float64); !ok {
					return fmt.Errorf("event %d: %v without numeric sort_index", i, e["name"])
				}
			default:
				return fmt.Errorf("event %d: unknown metadata %v", i, e["name"])
			}
		}
	}
	// Slices on one track must nest or follow each other: Perfetto's
	// importer drops slices that overlap partially.
	for k, ss := range tracks {
		sort.Slice(ss, func(i, j int) bool {
			return ss[i].start < ss[j].start || (ss[i].start == ss[j].start && ss[i].end > ss[j].end)
		})
		var open []span
		for _, s := range ss {
			for len(open) > 0 && open[len(open)-1].end <= s.start+1e-3 { // 1 ns: float rounding of ts+dur
				open = open[:len(open)-1]
			}
			if len(open) > 0 && s.end > open[len(open)-1].end+1e-3 {
				return fmt.Errorf("pid %v tid %v: slice [%v, %v] overlaps [%v, %v] without nesting", k[0], k[1], s.start, s.end, open[len(open)-1].start, open[len(open)-1].end)
			}
			open = append(open, s)
		}
	}
	return nil
}

func TestTraceIsValidTraceEventFormat(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, fixture.Report(t)); err != nil {
		t.Fatal(err)
	}
	if err := validate(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// TestTraceShowsWhatThePaperShows checks that the sample's trace holds
// every kind of track the issue asks for, not merely valid JSON.
func TestTraceShowsWhatThePaperShows(t *testing.T) {
	tr := Build(fixture.Report(t))
	count := map[string]int{}
	modes := map[string]bool{}
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "X" && e.Cat != "":
			count[e.Cat]++
			if e.Cat == "sync" {
				modes[e.Args["mode"].(string)] = true
			}
		case e.Ph == "C" && e.Name == "co-runners on CPU":
			count["occupancy"]++
		case e.Ph == "i":
			count[e.Cat+" instant"]++
		}
	}
	for _, want := range []string{"host", "sync", "kernel", "on", "off", "occupancy", "launch instant", "complete instant"} {
		if count[want] == 0 {
			t.Errorf("no %q events in the trace (have %v)", want, count)
		}
	}
	for _, m := range []string{"spin", "block", "hybrid"} {
		if !modes[m] {
			t.Errorf("no sync waits in mode %s", m)
		}
	}
}

func TestValidateRejectsBadTraces(t *testing.T) {
	for name, doc := range map[string]string{
		"not json":      `{"traceEvents": [`,
		"no events":     `{"events": []}`,
		"bad phase":     `{"traceEvents": [{"name": "a", "ph": "Q", "ts": 0, "pid": 1, "tid": 1}]}`,
		"string ts":     `{"traceEvents": [{"name": "a", "ph": "X", "ts": "0", "dur": 1, "pid": 1, "tid": 1}]}`,
		"no dur":        `{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "pid": 1, "tid": 1}]}`,
		"float pid":     `{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 1, "pid": 1.5, "tid": 1}]}`,
		"counter text":  `{"traceEvents": [{"name": "a", "ph": "C", "ts": 0, "pid": 1, "tid": 1, "args": {"n": "x"}}]}`,
		"misnested":     `{"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1}, {"name": "b", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 1}]}`,
		"nameless meta": `{"traceEvents": [{"name": "thread_name", "ph": "M", "ts": 0, "pid": 1, "tid": 1}]}`,
	} {
		if err := validate([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
