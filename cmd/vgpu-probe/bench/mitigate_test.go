package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func TestMitigateBadValue(t *testing.T) {
	for _, v := range []string{"slice=1us", "slice=1s", "fast", "slice=100"} {
		cmd := NewCmd(func(context.Context, *Options) error { t.Fatal("ran with a bad --mitigate"); return nil })
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs([]string{"--mitigate", v})
		err := cmd.Execute()
		if !errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--mitigate %s: got %v, want a one-line usage error", v, err)
		}
	}
}

// A small real run with the cells mitigated.
func TestRunMitigated(t *testing.T) {
	if _, err := mitigate.Check(mitigate.System, uint64(100*time.Microsecond)); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	var out bytes.Buffer
	cmd := NewCmd(nil)
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--steps", "100", "--reps", "1", "--modes", "block", "--contention", "while1", "--mitigate", "slice=100us", "--json", "--out", t.TempDir()})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"mode": "block"`) {
		t.Fatalf("no block row:\n%s", out.String())
	}
}
