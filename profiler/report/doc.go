// Package report joins what vgpu-probe measured into one model that the
// renderers (profiler/render/...) draw: experiment results, agent
// snapshots and timelines, hybridsync stats files and NVML samples.
//
// It derives the paper's figures: slowdown against the baseline (Figs. 1,
// 4-6), GPU utilisation and its drop (the paper's vGPU under-utilisation),
// kernels per second, launch and receive latency (Table II); and it judges:
// a vulnerability verdict per workload and a recommendation per VM, each
// carrying the numbers that justify it. Build is pure: the same inputs give
// the same report, byte for byte once rendered, which the golden tests rely on.
package report
