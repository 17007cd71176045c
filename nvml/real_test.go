package nvml

import (
	"errors"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealNVML samples the real library where there is one (the GPU
// machine); elsewhere it checks that the absence is ErrNoGPU and skips.
// Only main builds the real library in the product; a test may.
func TestRealNVML(t *testing.T) {
	s, err := Open(gonvml.New())
	if errors.Is(err, ErrNoGPU) {
		t.Skipf("no GPU here (%v); the real path runs on the GPU machine", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	smp, err := s.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range smp {
		if x.MemTotalBytes == 0 || x.SMClockMHz == 0 {
			t.Errorf("GPU %d: implausible sample %+v", x.GPU, x)
		}
		t.Logf("GPU %d %s: util %d%% SM %d MHz mem %d/%d MiB", x.GPU, s.Devices()[x.GPU].Name, x.UtilPct, x.SMClockMHz, x.MemUsedBytes>>20, x.MemTotalBytes>>20)
	}
}
