// An unmodified NAMD-like program (no hybridsync code): per step, CPU work,
// one kernel, cudaEventRecord, cudaEventSynchronize. Built with nvcc's
// default static cudart, so under LD_PRELOAD=libhybridsync.so its waits are
// replaced through the driver (cuGetProcAddress) path.
// Usage: namd_like STEPS HOST_US KERNEL_US  (KERNEL_US 0: mixed 50/500/2000)
// Prints {"wall_s":..,"cpu_s":..} to stdout.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sys/resource.h>
#include <cuda_runtime.h>
#include "spin_kernel.cuh"

__global__ void short_kernel(uint64_t ns, volatile int *d) { spin_kernel_body(ns, d); }
__global__ void long_kernel(uint64_t ns, volatile int *d) { spin_kernel_body(ns, d); }

static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static volatile unsigned long sink;
static void work(long n) { unsigned long x = sink | 1; for (long i = 0; i < n; i++) x = x * 6364136223846793005ul + 1442695040888963407ul; sink = x; }

int main(int argc, char **argv)
{
	if (argc != 4) { fprintf(stderr, "usage: namd_like STEPS HOST_US KERNEL_US\n"); return 2; }
	int steps = atoi(argv[1]);
	double host_us = atof(argv[2]), kernel_us = atof(argv[3]);
	double best = 1e9;
	for (int i = 0; i < 15; i++) { double t = now(); work(200000); t = now() - t; if (t < best) best = t; }
	long units = (long)(200000 * host_us * 1e-6 / best);
	cudaEvent_t ev;
	cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	spin_kernel<<<1, 1>>>(1000, nullptr);
	cudaDeviceSynchronize();
	const double mixed[3] = {50, 500, 2000};
	double t0 = now();
	for (int i = 0; i < steps; i++) {
		work(units);
		double us = kernel_us > 0 ? kernel_us : mixed[i % 3];
		// Mixed: three distinct kernels, as a real code's would be (the
		// interposer tells kernels apart by function and grid).
		if (kernel_us > 0 || i % 3 == 1)
			spin_kernel<<<1, 1>>>((uint64_t)(us * 1000), nullptr);
		else if (i % 3 == 0)
			short_kernel<<<1, 1>>>((uint64_t)(us * 1000), nullptr);
		else
			long_kernel<<<1, 1>>>((uint64_t)(us * 1000), nullptr);
		cudaEventRecord(ev, 0);
		if (cudaEventSynchronize(ev) != cudaSuccess) { fprintf(stderr, "sync failed\n"); return 1; }
	}
	double wall = now() - t0;
	rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
	printf("{\"wall_s\":%.4f,\"cpu_s\":%.4f}\n", wall, cpu);
	return 0;
}
