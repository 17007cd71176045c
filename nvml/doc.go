// Package nvml samples GPU metrics through NVML (github.com/NVIDIA/go-nvml):
// device utilisation, per-process utilisation, SM clock and memory use, at a
// configurable rate, for the experiment runner and the agent (--nvml) and for
// the profiler's plots of GPU utilisation over time.
//
// It takes an nvml.Interface and never calls nvml.New() itself: main builds
// the real library and tests pass go-nvml's mock (mock/dgxa100). A host
// without a GPU or without libnvidia-ml is not a failure: Open returns an
// error wrapping ErrNoGPU, which callers report once and carry on without
// GPU metrics.
package nvml
