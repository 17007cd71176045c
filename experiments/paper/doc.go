// Package paper holds the paper's experiments: a NAMD-like loop of CPU
// work, one kernel and a wait, run in each wait mode beside a co-runner,
// in the paper's scenarios (shared1: no isolation, shared2: CPU bandwidth
// control, baseline: half the vCPUs, none), on the local machine or in
// libvirt VMs. `vgpu-probe run` (runner, scenario, backend, workload) and
// `vgpu-probe bench` (bench: the modes on the simulated GPU, with and
// without the agent's hints) are its commands; device/ has the CUDA
// programs and scripts that run them on a GPU machine.
package paper
