/* Shared by the test programs: the CUDA runtime calls they make (the
 * stand-in's, or the real one's: same ABI), the "kernels" (host functions
 * whose first argument is the stand-in's duration in ns), and the stand-in's
 * test helpers. Programs print nothing to stdout; a failed check prints to
 * stderr and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct {
	unsigned x, y, z;
} dim3;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shm, cudaStream_t s);

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			exit(1);                                           \
		}                                                          \
	} while (0)

static inline int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Kernels: only their addresses matter (and names, for the stats). */
__attribute__((noinline, used)) void kernel_a(int64_t ns) { (void)ns; }
__attribute__((noinline, used)) void kernel_b(int64_t ns) { (void)ns; }

static inline cudaError_t launch(void (*k)(int64_t), int64_t ns, unsigned grid, cudaStream_t s)
{
	void *args[] = {&ns};
	dim3 g = {grid, 1, 1}, b = {128, 1, 1};
	return cudaLaunchKernel((const void *)k, g, b, args, 0, s);
}

/* The stand-in driver's helpers, found in the loaded libcuda.so.1. */
static int64_t (*done_at)(void *);
static int (*result_of)(void *);
static long *blocking_waits, *spin_waits, *queries;

static inline void standin_open(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	CHECK(h, "stand-in driver not loaded");
	done_at = (int64_t(*)(void *))dlsym(h, "standin_event_done_at");
	result_of = (int (*)(void *))dlsym(h, "standin_event_result");
	blocking_waits = (long *)dlsym(h, "standin_blocking_waits");
	spin_waits = (long *)dlsym(h, "standin_spin_waits");
	queries = (long *)dlsym(h, "standin_queries");
	CHECK(done_at && result_of && blocking_waits && spin_waits && queries, "not the stand-in driver");
}

static inline void report_counters(void)
{
	fprintf(stderr, "standin blocking=%ld spin=%ld queries=%ld\n", *blocking_waits, *spin_waits, *queries);
}
