package suite

import (
	"slices"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
)

// TestMitigatedArms: with MitigatedArms the in-process programs are told
// the other arms (APPS_INPROC_UNMITIGATED), the setting's name says which
// arms kept the slice, and each round's slice reaches runs.jsonl.
func TestMitigatedArms(t *testing.T) {
	a := &Agent{Mitigation: &mitigate.Config{Slice: 100 * time.Microsecond}, MitigatedArms: []string{"hybridsync"}}
	c := &Config{Agent: a}
	env := c.agentEnv(Program{Name: "p", InProcess: true})
	if want := EnvUnmitigated + "=cuda-default,cuda-blocking"; !slices.Equal(env, []string{want}) {
		t.Errorf("environment %q, want [%s]", env, want)
	}
	if got, want := a.String(), "mitigate=slice=100µs arms=hybridsync"; got != want {
		t.Errorf("setting %q, want %q", got, want)
	}
	if err := a.check([]Program{{Name: "p", InProcess: true}}); err != nil {
		t.Errorf("in-process program: %v", err)
	}
	if err := a.check([]Program{{Name: "q"}}); err == nil {
		t.Error("a program of one process per arm was accepted")
	}
	if env := (&Config{Agent: &Agent{Mitigation: a.Mitigation}}).agentEnv(Program{Name: "p"}); env != nil {
		t.Errorf("every arm mitigated: environment %q, want none", env)
	}

	var r Run
	line := `{"steps":2,"wall_s":1,"cpu_s":1,"rounds":[{"round":0,"arm":"hybridsync","steps":1,"wall_s":0.5,"cpu_s":0.5,"slice_ns":100000}]}`
	rounds, err := parseResult([]byte(line), &r)
	if err != nil || len(rounds) != 1 || rounds[0].SliceNs != 100_000 {
		t.Errorf("rounds %+v, %v; want one with slice_ns 100000", rounds, err)
	}
}
