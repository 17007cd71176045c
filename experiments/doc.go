// Package experiments holds the project's measurements, in two parts,
// and what both use:
//
//   - paper/: the paper's experiments (`vgpu-probe run` and `bench`): the
//     scenarios (shared1, shared2, baseline), the NAMD-like workload on
//     the simulated GPU or a real one, the backends that place it (local
//     processes and cgroups, libvirt VMs), the runner that crosses them,
//     and the CUDA programs of the GPU machine (paper/device);
//   - apps/: the application suite (`vgpu-probe apps`, and what `advise`
//     runs a user's program with): real programs (PyTorch, CuPy, GROMACS,
//     OpenMP) run in each way of waiting (the arms) alone and beside
//     busy loops, its suite files, scripts and diagnostics;
//   - corunner/ (the busy loops and other co-runners, pinned) and cpucap/
//     (cgroup CPU bandwidth control), which both parts use.
//
// The product's commands live elsewhere: advise/ (over the apps suite),
// the agent, the profiler, the library.
package experiments
