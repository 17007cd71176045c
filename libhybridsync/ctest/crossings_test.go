package ctest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// crossingsDoc is the stats file's "crossings" object and what the test
// compares it with.
type crossingsDoc struct {
	Outcomes *struct {
		Reports uint64 `json:"reports"`
	} `json:"outcomes"`
	Crossings *struct {
		Waits  map[string]map[string]uint64 `json:"waits"`
		IntoGo map[string]uint64            `json:"into_go"`
	} `json:"crossings"`
}

// TestCrossingsPerWait keeps docs/architecture.md's account of the wait
// path true ("One wait"): a wait calls into Go once when it goes through the
// policy and never otherwise (found complete, left to CUDA, blocked on a
// shadow event), a report once, and nothing else on the wait path does.
// rtapp makes a known number of waits of each kind (two threads of 120
// iterations: an event wait in two of three, a stream wait in the third;
// then a context wait, and two event waits that fail), every one of which
// must be counted once; in the modes other than the default, each one
// that found its work unfinished goes through the policy.
func TestCrossingsPerWait(t *testing.T) {
	need(t)
	so := filepath.Join(built.prefix, "lib", "libhybridsync.so")
	want := map[string]uint64{"event": 2*80 + 2, "stream": 2 * 40, "ctx": 1}
	for _, mode := range []string{"hybrid", "block", "spin"} {
		path := filepath.Join(t.TempDir(), "stats.json")
		run(t, []string{"LD_PRELOAD=" + so, "HYBRIDSYNC_MODE=" + mode, "HYBRIDSYNC_STATS=" + path}, "rtapp_dyn", "120", "2", "20000")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d crossingsDoc
		if err := json.Unmarshal(b, &d); err != nil || d.Crossings == nil {
			t.Fatalf("%s: stats without crossings (%v): %s", mode, err, b)
		}
		c := d.Crossings
		for kind, n := range want {
			paths := c.Waits[kind]
			var sum uint64
			for _, v := range paths {
				sum += v
			}
			if sum != n {
				t.Errorf("%s: %d %s waits counted (%v), the program made %d", mode, sum, kind, paths, n)
			}
			if c.IntoGo[kind] != paths["policy"] {
				t.Errorf("%s: %s waits called into Go %d times, %d went through the policy (%v)", mode, kind, c.IntoGo[kind], paths["policy"], paths)
			}
			if mode != "hybrid" && paths["device"]+paths["shadow"] != 0 {
				t.Errorf("%s: %s waits %v: in an explicit mode every unfinished wait is the policy's", mode, kind, paths)
			}
		}
		var reports uint64
		if d.Outcomes != nil {
			reports = d.Outcomes.Reports
		}
		if c.IntoGo["reports"] != reports || (mode == "hybrid") != (reports > 0) {
			t.Errorf("%s: %d reports into Go, %d made", mode, c.IntoGo["reports"], reports)
		}
		// The environment's check at load, the configuration (parsed,
		// then started) and the stats file at exit.
		if c.IntoGo["other"] > 4 {
			t.Errorf("%s: %d other calls into Go, want at most 4 (the check at load, configuration, start, stats)", mode, c.IntoGo["other"])
		}
		t.Logf("%s: waits %v, into Go %v", mode, c.Waits, c.IntoGo)
	}
}
