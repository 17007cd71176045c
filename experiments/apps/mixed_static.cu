// Unmodified CUDA user code (no hybridsync), built with nvcc's default static
// cudart, so an interposer reaches it only through the driver
// (cuGetProcAddress). Per step: kernels of mixed lengths (~20, ~100, ~500 µs,
// busy-waiting on %globaltimer) with a cudaEventSynchronize on an event
// recorded mid-step and a cudaStreamSynchronize at the end, plus a little
// host work between them.
// Usage: mixed_static [--seconds S | --steps N | --inproc ROUNDS]; prints
// one JSON line.
#include <cuda_runtime.h>
#include "loop.h"
#include "../device/spin_kernel.cuh"

__global__ void k20(uint64_t ns) { spin_kernel_body(ns, nullptr); }
__global__ void k100(uint64_t ns) { spin_kernel_body(ns, nullptr); }
__global__ void k500(uint64_t ns) { spin_kernel_body(ns, nullptr); }

static volatile unsigned long sink;
static void host_work(long n) { unsigned long x = sink | 1; for (long i = 0; i < n; i++) x = x * 6364136223846793005ul + 1442695040888963407ul; sink = x; }

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "mixed_static: %s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

struct work { cudaStream_t s; cudaEvent_t ev; };

static int step(void *arg)
{
	cudaStream_t s = ((struct work *)arg)->s;
	cudaEvent_t ev = ((struct work *)arg)->ev;
	k20<<<1, 1, 0, s>>>(20000);
	k100<<<1, 1, 0, s>>>(100000);
	k20<<<1, 1, 0, s>>>(20000);
	CHECK(cudaEventRecord(ev, s));
	CHECK(cudaEventSynchronize(ev));
	host_work(20000);
	k500<<<1, 1, 0, s>>>(500000);
	k20<<<1, 1, 0, s>>>(20000);
	k100<<<1, 1, 0, s>>>(100000);
	CHECK(cudaStreamSynchronize(s));
	host_work(20000);
	return 0;
}

int main(int argc, char **argv)
{
	struct loop_args a = parse_args(argc, argv, "mixed_static");
	struct work w;
	CHECK(cudaStreamCreateWithFlags(&w.s, cudaStreamNonBlocking));
	CHECK(cudaEventCreateWithFlags(&w.ev, cudaEventDisableTiming));
	return run_loop(a, "mixed_static", step, &w, 20);
}
