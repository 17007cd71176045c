package mitigate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// TestThreadChurnLogsOnce: threads that come and go on a mitigated
// target get the slice without an info line each re-scan; the target's
// first threads are one line.
func TestThreadChurnLogsOnce(t *testing.T) {
	var out bytes.Buffer
	m, err := New(Options{Slice: slice, Sched: &fakeSched{}, Log: zerolog.New(&out).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	madeUp(m)
	tg := targets.Target{Kind: targets.KindPID, Name: "4242", Threads: []targets.Thread{{TID: 4242, VCPU: -1}}}
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	for i := range 60 {
		churned := tg
		if i%2 == 0 {
			churned.Threads = append(churned.Threads, targets.Thread{TID: 5000 + i, VCPU: -1})
		}
		m.Apply(targets.Event{Kind: targets.Added, Target: churned})
		if i%2 == 0 && !m.Mitigated(5000+i) {
			t.Fatalf("new thread %d not mitigated", 5000+i)
		}
	}
	if n := strings.Count(out.String(), `"level":"info"`); n != 1 {
		t.Errorf("60 re-scans with a thread coming and going: %d info lines, want 1:\n%s", n, out.String())
	}
}
