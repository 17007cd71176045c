package monitor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// TestThreadChurnLogsOnce: a target whose threads come and go on every
// re-scan (here 60 times, a minute at the 1 s re-scan) writes one info
// line, when it is first watched; the updates are debug.
func TestThreadChurnLogsOnce(t *testing.T) {
	pid, _ := sleeper(t)
	other, _ := sleeper(t) // stands for a thread that comes and goes
	var out bytes.Buffer
	m := New(newStatsProbe(), Options{Log: zerolog.New(&out).Level(zerolog.InfoLevel), Window: time.Minute})
	tg := pidTarget(pid)
	m.Apply(targets.Event{Kind: targets.Added, Target: tg})
	for i := range 60 {
		churned := tg
		if i%2 == 0 {
			churned.Threads = append(churned.Threads, targets.Thread{TID: other, VCPU: -1})
		}
		m.Apply(targets.Event{Kind: targets.Added, Target: churned})
	}
	if n := strings.Count(out.String(), `"level":"info"`); n != 1 {
		t.Errorf("a target with churning threads wrote %d info lines over 60 re-scans, want 1:\n%s", n, out.String())
	}
}
