package runner

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-probe/vgpu-probe/nvml"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// SampleGPUs records NVML samples (lib is the NVML library) every so
// often in the background for as long as the run lasts; the function it
// returns stops the recording and writes it into dir, beside
// results.json, under a name of its own, so a resumed run adds a file and
// loses none. A host without a GPU or NVML is said once on log; the run
// goes on.
func SampleGPUs(ctx context.Context, lib gonvml.Interface, every time.Duration, dir string, log io.Writer) (stop func()) {
	s, err := nvml.Open(lib)
	if err != nil {
		fmt.Fprintf(log, "vgpu-probe: GPU utilisation not sampled: %v\n", err)
		return func() {}
	}
	// A day at 5 samples/s; beyond that the recording counts what it drops.
	rec := s.Start(ctx, every, 500_000)
	return func() {
		defer s.Close()
		ser, err := rec.Stop()
		if err != nil && len(ser.Samples) == 0 {
			fmt.Fprintf(log, "vgpu-probe: GPU samples: %v\n", err)
			return
		}
		path := filepath.Join(dir, "nvml-"+results.Stamp(time.Now())+".json")
		if err := nvml.WriteSeries(path, ser); err != nil {
			fmt.Fprintf(log, "vgpu-probe: write GPU samples: %v\n", err)
			return
		}
		fmt.Fprintf(log, "GPU samples: %s\n", path)
	}
}
