// Per-call cost of waiting for an event that has already completed:
// cudaEventQuery and cuEventQuery (the floor), hs_sync (explicit API), and
// cudaEventSynchronize (interposed when run under LD_PRELOAD). Median of 9
// rounds of 200000 calls. And the host-side cost of one kernel launch
// (interposed under LD_PRELOAD): batches of 256 empty kernels, timed
// without the synchronize that drains each batch. Prints JSON to stdout.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <dlfcn.h>
#include <cuda_runtime.h>
#include <hybridsync.h>

static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

template <class F> static double per_call(F f)
{
	const int n = 200000;
	double r[9];
	for (int k = 0; k < 9; k++) {
		double t0 = now();
		for (int i = 0; i < n; i++)
			f();
		r[k] = (now() - t0) / n;
	}
	std::sort(r, r + 9);
	return r[4];
}

__global__ void empty() {}

int main()
{
	cudaEvent_t ev;
	cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	empty<<<1, 1>>>();
	cudaEventRecord(ev, 0);
	cudaDeviceSynchronize();
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	auto cuq = (int (*)(cudaEvent_t))dlsym(h, "cuEventQuery");
	if (hs_init(NULL) != HS_OK) {
		fprintf(stderr, "hs_init: %s\n", hs_last_error());
		return 1;
	}
	hs_kernel_t k = hs_kernel("empty");
	double q = per_call([&] { cudaEventQuery(ev); });
	double dq = per_call([&] { cuq(ev); });
	double hs = per_call([&] { hs_sync(ev, k); });
	double hs0 = per_call([&] { hs_sync(ev, 0); });
	double es = per_call([&] { cudaEventSynchronize(ev); });
	double launch[9];
	for (int k = 0; k < 9; k++) {
		double sum = 0;
		for (int b = 0; b < 100; b++) {
			double t0 = now();
			for (int i = 0; i < 256; i++)
				empty<<<1, 1>>>();
			sum += now() - t0;
			cudaDeviceSynchronize();
		}
		launch[k] = sum / (100 * 256);
	}
	std::sort(launch, launch + 9);
	printf("{\"cudaEventQuery_ns\":%.1f,\"cuEventQuery_ns\":%.1f,\"hs_sync_ns\":%.1f,\"hs_sync_unknown_kernel_ns\":%.1f,"
	       "\"cudaEventSynchronize_ns\":%.1f,\"hs_sync_over_cudaEventQuery_ns\":%.1f,\"launch_ns\":%.1f}\n",
	       q, dq, hs, hs0, es, hs - q, launch[4]);
	return 0;
}
