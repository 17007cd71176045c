package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
)

// wantFieldError checks that err is one line naming prefix (the file)
// and field.
func wantFieldError(t *testing.T, what string, err error, prefix string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", what)
		return
	}
	if msg := err.Error(); !strings.HasPrefix(msg, prefix) || strings.Contains(msg, "\n") {
		t.Errorf("%s: error %q is not one line starting %q", what, msg, prefix)
	}
}

func TestMeasuredInputsPassTheChecks(t *testing.T) {
	d := filepath.Join("..", "testdata")
	if _, err := ReadStats(filepath.Join(d, "hybridsync-stats.json")); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"results.json", "results-run.json"} {
		b, err := os.ReadFile(filepath.Join(d, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseResults(name, b); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(d, "agent-snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := agentapi.ParseSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSnapshot(s); err != nil {
		t.Error(err)
	}
}

func TestParseStatsRejectsImpossibleValues(t *testing.T) {
	for field, doc := range map[string]string{
		"spin_seconds":                      `{"version":1,"mode":"hybrid","calls":1,"spin_seconds":-1}`,
		"unknown_kernels.block_seconds":     `{"version":1,"mode":"hybrid","unknown_kernels":{"block_seconds":1e308}}`,
		"wake_late_us":                      `{"version":1,"mode":"hybrid","wake_late_us":-3}`,
		"kernels[0].mean_us":                `{"version":1,"mode":"hybrid","kernels":[{"id":1,"mean_us":-500}]}`,
		"spin_hits + sleep_spin_hits":       `{"version":1,"mode":"hybrid","calls":10,"spin_hits":8,"blocks":6}`,
		"kernels[0].spin_hits + sleep_spin": `{"version":1,"mode":"hybrid","kernels":[{"id":1,"calls":1,"sleep_spin_hits":2}]}`,
	} {
		_, err := ParseStats("s.json", []byte(doc))
		wantFieldError(t, field, err, "s.json: "+field)
	}
}

func TestCheckSnapshotRejectsImpossibleValues(t *testing.T) {
	for field, doc := range map[string]string{
		"window_seconds":                              `{"window_seconds":-5,"targets":[]}`,
		"targets[0].quota_us":                         `{"targets":[{"name":"vm","quota_us":-1}]}`,
		"targets[0].threads[0].steal_fraction":        `{"targets":[{"name":"vm","threads":[{"vcpu":0,"steal_fraction":-3}]}]}`,
		"targets[0].threads[1].steal_fraction":        `{"targets":[{"name":"vm","threads":[{"vcpu":0},{"vcpu":1,"steal_fraction":1.5}]}]}`,
		"targets[0].threads[0].run_seconds":           `{"targets":[{"name":"vm","threads":[{"vcpu":0,"run_seconds":-1}]}]}`,
		"targets[0].threads[0].offcpu_p99_us":         `{"targets":[{"name":"vm","threads":[{"vcpu":0,"offcpu_p99_us":1e308}]}]}`,
		"targets[0].threads[0].vcpu":                  `{"targets":[{"name":"vm","threads":[{"vcpu":-2}]}]}`,
		"targets[0].threads[0].corunners[0].waited_s": `{"targets":[{"name":"vm","threads":[{"vcpu":0,"corunners":[{"comm":"x","waited_seconds":-1}]}]}]}`,
	} {
		s, err := agentapi.ParseSnapshot([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		wantFieldError(t, field, CheckSnapshot(s), field)
	}
}

func TestParseResultsChecksTheCellsAgentSnapshots(t *testing.T) {
	c := cell("shared1", "spin", 2, 1, 1)
	c.MinWallS, c.MaxWallS = 2, 2
	c.Agent = []byte(`{"targets":[{"name":"runner","kind":"pid","threads":[{"tid":1,"vcpu":0,"steal_fraction":-3}]}]}`)
	b, err := json.Marshal(file(c))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseResults("r.json", b)
	wantFieldError(t, "steal_fraction in a cell's snapshot", err, "r.json: cells[0].agent.targets[0].threads[0].steal_fraction")
	c.Agent = []byte(`{"nope": true}`)
	b, _ = json.Marshal(file(c))
	_, err = ParseResults("r.json", b)
	wantFieldError(t, "a cell's snapshot that is none", err, "r.json: cells[0].agent: not an agent snapshot")
}
