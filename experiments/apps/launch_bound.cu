// Unmodified CUDA user code (no hybridsync): a launch-bound loop. Per step,
// 16 empty kernels, then cudaEventRecord + cudaEventSynchronize. Its time is
// almost all launch path, so it shows what an interposer adds per launch.
// Usage: launch_bound [--seconds S | --steps N | --inproc ROUNDS]; prints
// one JSON line.
#include <cuda_runtime.h>
#include "loop.h"

__global__ void empty_kernel() {}

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "launch_bound: %s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

static int step(void *arg)
{
	cudaEvent_t ev = *(cudaEvent_t *)arg;
	for (int i = 0; i < 16; i++)
		empty_kernel<<<1, 1>>>();
	CHECK(cudaEventRecord(ev, 0));
	CHECK(cudaEventSynchronize(ev));
	return 0;
}

int main(int argc, char **argv)
{
	struct loop_args a = parse_args(argc, argv, "launch_bound");
	cudaEvent_t ev;
	CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	return run_loop(a, "launch_bound", step, &ev, 1000);
}
