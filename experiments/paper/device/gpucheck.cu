// Checks libhybridsync's explicit API on a real GPU, every mode: hs_sync
// never returns before the kernel finished (its host-mapped flag is set and
// cudaEventQuery agrees), and returns cudaEventSynchronize's codes (an
// invalid handle; a kernel that traps, in `gpucheck fault`).
// Prints one line per check to stdout; exits 1 on a failure.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <hybridsync.h>
#include "spin_kernel.cuh"

#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); exit(1); } } while (0)

__global__ void trap_kernel() { asm volatile("trap;"); }

int main(int argc, char **argv)
{
	const char *modes[] = {"hybrid", "paper", "spin", "yield", "block", "cuda-auto"};
	int *flag;
	CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped) == cudaSuccess, "host alloc");
	int *dflag;
	cudaHostGetDevicePointer(&dflag, flag, 0);
	cudaStream_t s;
	cudaEvent_t ev;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (argc > 1 && !strcmp(argv[1], "fault")) {
		CHECK(hs_init(NULL) == HS_OK, "init: %s", hs_last_error());
		trap_kernel<<<1, 1, 0, s>>>();
		cudaEventRecord(ev, s);
		int got = hs_sync(ev, hs_kernel("trap"));
		int want = cudaEventSynchronize(ev);
		printf("fault: hs_sync=%d cudaEventSynchronize=%d\n", got, want);
		CHECK(got == want && got != 0, "fault codes differ");
		return 0;
	}
	hs_kernel_t k = hs_kernel("spin");
	for (int m = 0; m < 6; m++) {
		struct hs_config c = {sizeof c, modes[m], 0, NULL, NULL};
		CHECK(hs_init(&c) == HS_OK, "init %s: %s", modes[m], hs_last_error());
		long early = 0;
		for (int i = 0; i < 300; i++) {
			*flag = 0;
			spin_kernel<<<1, 1, 0, s>>>(20000 + 40000 * (i % 7), dflag);
			hs_launch_mark(s, k);
			cudaEventRecord(ev, s);
			int rc = (i % 5 == 4) ? hs_stream_sync(s, k) : hs_sync(ev, k);
			CHECK(rc == 0, "%s: rc %d", modes[m], rc);
			if (!*(volatile int *)flag || cudaEventQuery(ev) != cudaSuccess)
				early++;
		}
		printf("mode %-9s 300 waits, %ld returned early\n", modes[m], early);
		CHECK(early == 0, "returned before completion");
		static char junk[256];
		int want = cudaEventSynchronize((cudaEvent_t)junk);
		int got = hs_sync((hs_event_t)junk, k);
		CHECK(got == want, "invalid handle: hs_sync %d, cudaEventSynchronize %d", got, want);
	}
	char buf[4096];
	long n = hs_stats_json(buf, sizeof buf);
	CHECK(n > 0, "stats");
	printf("stats %s\n", buf);
	return 0;
}
