package main

import (
	"slices"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
)

// `bench --device cuda` and run's cells find the GPU only if this binary
// registered it.
func TestCUDARegistered(t *testing.T) {
	if !slices.Contains(workload.Devices(), "cuda") {
		t.Fatalf("cuda not among %v", workload.Devices())
	}
}
