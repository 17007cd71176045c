// Does switching a live context to blocking-sync (cuCtxSetFlags, what
// libhybridsync's policy arm does) make CUDA's own waits block, for every
// kind of wait, and for events created before the switch?
//
// For each case it waits 20 times on a 5 ms kernel and prints the CPU time
// the waiting thread spent per wait: ~5000 µs means CUDA spun, a few
// hundred or less means it blocked. The reference rows are a context that
// was blocking-sync from the start (cudaSetDeviceFlags before any work)
// and one that never was, in child processes so that each gets a fresh
// context. Last, what switching the schedule costs.
//
//   nvcc -O2 -o ctxflags ctxflags.cu -lcuda && ./ctxflags
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spin_kernel.cuh"

static double thread_cpu_us()
{
	timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define CHECK(x)                                                                   \
	do {                                                                       \
		if ((x) != 0) {                                                    \
			fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

enum kind { EVENT, STREAM, DEVICE };
static const char *kind_name[] = {"cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize"};

// CPU µs per wait of one kind, on event ev (created by the caller).
static double cpu_per_wait(kind k, cudaStream_t s, cudaEvent_t ev)
{
	const int n = 20;
	double total = 0;
	for (int i = 0; i < n; i++) {
		spin_kernel<<<1, 1, 0, s>>>(5000000, nullptr);
		CHECK(cudaEventRecord(ev, s));
		double c0 = thread_cpu_us();
		switch (k) {
		case EVENT: CHECK(cudaEventSynchronize(ev)); break;
		case STREAM: CHECK(cudaStreamSynchronize(s)); break;
		case DEVICE: CHECK(cudaDeviceSynchronize()); break;
		}
		total += thread_cpu_us() - c0;
	}
	return total / n;
}

static void report(const char *ctx, const char *when, cudaStream_t s, cudaEvent_t ev)
{
	for (int k = EVENT; k <= DEVICE; k++)
		printf("%-28s %-32s %-22s %8.0f µs CPU per 5 ms wait\n", ctx, when, kind_name[k], cpu_per_wait(kind(k), s, ev));
}

static void reference(bool blocking)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (blocking)
			CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
		cudaStream_t s;
		cudaEvent_t ev;
		CHECK(cudaStreamCreate(&s));
		CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
		report(blocking ? "blocking-sync from the start" : "default schedule", "", s, ev);
		fflush(stdout);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
}

int main()
{
	// Before this process touches CUDA: fork is safe.
	reference(false);
	reference(true);

	cudaStream_t s;
	cudaEvent_t before, after;
	CHECK(cudaStreamCreate(&s));
	CHECK(cudaEventCreateWithFlags(&before, cudaEventDisableTiming));
	report("default schedule", "", s, before);

	unsigned flags;
	CHECK(cuCtxGetFlags(&flags));
	CHECK(cuCtxSetFlags((flags & ~CU_CTX_SCHED_MASK) | CU_CTX_SCHED_BLOCKING_SYNC));
	CHECK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
	report("switched to blocking-sync", "event created before the switch", s, before);
	report("switched to blocking-sync", "event created after the switch", s, after);

	CHECK(cuCtxSetFlags(flags));
	report("switched back", "event created before the switch", s, before);

	// What one switch and back costs, idle and with a kernel queued.
	for (int busy = 0; busy < 2; busy++) {
		const int n = 200;
		double total = 0;
		for (int i = 0; i < n; i++) {
			if (busy)
				spin_kernel<<<1, 1, 0, s>>>(200000, nullptr);
			timespec t0, t1;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			CHECK(cuCtxSetFlags((flags & ~CU_CTX_SCHED_MASK) | CU_CTX_SCHED_BLOCKING_SYNC));
			CHECK(cuCtxSetFlags(flags));
			clock_gettime(CLOCK_MONOTONIC, &t1);
			total += (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
			CHECK(cudaStreamSynchronize(s));
		}
		printf("cuCtxSetFlags to blocking-sync and back, %s: %.1f µs\n", busy ? "a 200 µs kernel queued" : "idle", total / n);
	}
	return 0;
}
