// Package apps holds the application suite: real programs (suite.json:
// PyTorch, CuPy, GROMACS, OpenMP programs, a CUDA stand-in) run in each
// way of waiting (the arms: as they are, CUDA's blocking-sync mode,
// libhybridsync preloaded, the hybridsync-run launcher) alone and beside
// busy loops on their CPUs, as `vgpu-probe apps` does (suite), and as
// `vgpu-probe advise` does for one program of a user's. Besides the Go
// package: the programs and their suite files, blocksync.c (CUDA's
// blocking-sync mode as a preload), run.sh (the suite on the GPU
// machine), and diag/ (the scripts behind single measurements of
// docs/BENCHMARKS.md).
package apps
