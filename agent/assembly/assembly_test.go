package assembly

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
)

// A part that fails at start undoes the ones before it: the mitigator's
// journal and the locks it took are gone, and the programs were never
// loaded.
func TestStartFailureUndoes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sets a process's slice: needs root")
	}
	if _, err := mitigate.Check(mitigate.System, uint64(100*time.Microsecond)); err != nil {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	state := t.TempDir()
	_, err := Start(context.Background(), Options{Log: zerolog.Nop(), StateDir: state, Monitor: true,
		Mitigation: &mitigate.Config{Slice: 100 * time.Microsecond}, ClaimProcesses: []int{os.Getpid()},
		Hints: filepath.Join(t.TempDir(), "missing"),
		LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
			t.Fatal("programs loaded after a part failed")
			return nil, nil
		}})
	if !errors.Is(err, ErrRequest) {
		t.Fatalf("a missing hints directory: %v, want ErrRequest", err)
	}
	t.Log(err)
	if es, _ := os.ReadDir(state); len(es) != 0 {
		t.Fatalf("left in the state directory: %v", es)
	}
}
