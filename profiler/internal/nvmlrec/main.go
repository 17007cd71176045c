// Command nvmlrec records NVML samples (package nvml) to a file until it
// is interrupted, for `vgpu-probe report --nvml` while the runner and the
// agent do not record them themselves. Like every main, it is the one place
// that builds the real NVML library.
//
//	go run ./profiler/internal/nvmlrec -o nvml.json -interval 100ms
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-probe/vgpu-probe/nvml"
	"github.com/vgpu-probe/vgpu-probe/results"
)

func main() {
	out := flag.String("o", "nvml.json", "file to write the samples to")
	every := flag.Duration("interval", 100*time.Millisecond, "sampling interval")
	limit := flag.Int("limit", 100000, "most samples kept")
	dur := flag.Duration("duration", 0, "stop after this long (0: on SIGINT/SIGTERM)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	s, err := nvml.Open(gonvml.New())
	if errors.Is(err, nvml.ErrNoGPU) {
		fmt.Fprintln(os.Stderr, "nvmlrec:", err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmlrec:", err)
		os.Exit(1)
	}
	defer s.Close()
	ser, err := s.Record(ctx, *every, *limit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmlrec:", err)
	}
	b, _ := json.MarshalIndent(ser, "", " ")
	if err := results.WriteAtomic(*out, b); err != nil {
		fmt.Fprintln(os.Stderr, "nvmlrec:", err)
		os.Exit(1)
	}
}
