/* A GROMACS-like OpenMP step loop (mdrun -ntomp N with the update on the
 * GPU): per step, REGIONS OpenMP parallel regions share HOST_US of CPU work
 * among the threads (each ends in the implicit barrier), then the master
 * alone launches a "kernel" of KERNEL_US on the device, does MASTER_US of
 * CPU work of its own, and waits for it (cudaEventSynchronize, or with
 * --wait stream cudaStreamSynchronize), while the other threads wait in
 * the OpenMP runtime for the next region (GNU libgomp spins there up to
 * GOMP_SPINCOUNT iterations, 300,000 by default, then sleeps); every
 * SEARCH_EVERY steps one larger region of SEARCH_US (GROMACS's pair
 * search), after SERIAL_US of the master's CPU work alone (the search's
 * serial part: longer than libgomp's spin, it lets the other threads
 * fall asleep, to be woken by the next region). Thread i is pinned to the i-th CPU the process may use, as
 * mdrun -pin on does.
 *
 * Built with gcc -fopenmp against the CUDA stand-in (libhybridsync/testdata/
 * standin: a kernel completes its first argument's ns after launch), or on
 * a GPU with nvcc -x cu -Xcompiler -fopenmp (a kernel busy-waits on the
 * GPU's timer): experiments/apps/diag/ompsteps.sh does either.
 *
 * Usage: ompsteps [--steps N | --seconds S] [--kernel-us K] [--host-us H]
 *        [--master-us M] [--regions R] [--search-every E] [--search-us S]
 *        [--serial-us U]
 *        [--wait event|stream] [--blocking-sync] [--blocking-event] [--no-pin]
 * --blocking-sync: CUDA's blocking-sync mode (stream waits sleep; a plain
 * event's wait still spins, in CUDA as in the stand-in); --blocking-event:
 * the event is made with cudaEventBlockingSync, so that every event wait
 * sleeps. The CPU work is an amount of computation (calibrated once against the
 * thread's CPU time), not a time: a descheduled thread takes longer.
 * Prints one JSON line on stdout: {"program","threads","steps","wall_s",
 * "cpu_s","step_us","p50_us","p90_us"} (the mean step, and the median and
 * 90th percentile of the steps' lengths); errors go to stderr, exit 1. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#ifdef __CUDACC__
#include <cuda_runtime.h>
__global__ void nonbonded(int64_t ns)
{
	uint64_t start, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - start < (uint64_t)ns);
}
static cudaError_t launch_kernel(int64_t ns, cudaStream_t s)
{
	nonbonded<<<1, 1, 0, s>>>(ns);
	return cudaGetLastError();
}
/* CUDA's blocking-sync mode, set before the context exists. */
static int blocking_sync(void) { return cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync); }
#else
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct {
	unsigned x, y, z;
} dim3;
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
#define cudaEventBlockingSync 1
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shm, cudaStream_t s);
#define cudaSuccess 0
__attribute__((noinline, used)) void nonbonded(int64_t ns) { (void)ns; }
static cudaError_t launch_kernel(int64_t ns, cudaStream_t s)
{
	void *args[] = {&ns};
	dim3 g = {64, 1, 1}, b = {128, 1, 1};
	return cudaLaunchKernel((const void *)nonbonded, g, b, args, 0, s);
}
/* The stand-in's context schedule (cuCtxSetFlags): blocking-sync. */
static int blocking_sync(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	int (*set)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuCtxSetFlags") : NULL;
	return set ? set(4) : 1;
}
#endif

#define FAIL(...)                                          \
	do {                                               \
		fprintf(stderr, "ompsteps: " __VA_ARGS__); \
		fprintf(stderr, "\n");                     \
		exit(1);                                   \
	} while (0)

static double clock_s(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* work does n units of computation; a unit is a few ns. */
static volatile unsigned long sink;
static void work(long n)
{
	unsigned long x = sink | 1;
	for (long i = 0; i < n; i++)
		x = x * 6364136223846793005ul + 1442695040888963407ul;
	sink = x;
}

/* units_per_us: calibrated against the thread's CPU time, the best of
 * five tries (a descheduling does not count as CPU time, but a cold cache
 * or a frequency change might). */
static double units_per_us(void)
{
	double best = 0;
	for (int i = 0; i < 5; i++) {
		long n = 2000000;
		double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
		work(n);
		double us = (clock_s(CLOCK_THREAD_CPUTIME_ID) - t0) * 1e6;
		if (us > 0 && n / us > best)
			best = n / us;
	}
	return best;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* pin puts the calling OpenMP thread on the i-th CPU of set. */
static void pin(const cpu_set_t *set, int i)
{
	int k = -1;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (CPU_ISSET(cpu, set) && ++k == i % CPU_COUNT(set)) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			if (sched_setaffinity(0, sizeof one, &one) != 0)
				FAIL("pinning thread %d to CPU %d", i, cpu);
			return;
		}
	}
}

int main(int argc, char **argv)
{
	long steps = 0;
	double seconds = 0, kernel_us = 400, host_us = 100, master_us = 50, search_us = 4000, serial_us = 0;
	int regions = 2, search_every = 100, stream_wait = 0, blocking = 0, event_flags = 0, pinned = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--blocking-sync"))
			blocking = 1;
		else if (!strcmp(a, "--blocking-event"))
			event_flags = cudaEventBlockingSync;
		else if (!strcmp(a, "--no-pin"))
			pinned = 0;
		else if (v && !strcmp(a, "--steps"))
			steps = atol(v), i++;
		else if (v && !strcmp(a, "--seconds"))
			seconds = atof(v), i++;
		else if (v && !strcmp(a, "--kernel-us"))
			kernel_us = atof(v), i++;
		else if (v && !strcmp(a, "--host-us"))
			host_us = atof(v), i++;
		else if (v && !strcmp(a, "--master-us"))
			master_us = atof(v), i++;
		else if (v && !strcmp(a, "--regions"))
			regions = atoi(v), i++;
		else if (v && !strcmp(a, "--search-every"))
			search_every = atoi(v), i++;
		else if (v && !strcmp(a, "--search-us"))
			search_us = atof(v), i++;
		else if (v && !strcmp(a, "--serial-us"))
			serial_us = atof(v), i++;
		else if (v && !strcmp(a, "--wait") && (!strcmp(v, "event") || !strcmp(v, "stream")))
			stream_wait = !strcmp(v, "stream"), i++;
		else {
			fprintf(stderr, "usage: ompsteps [--steps N | --seconds S] [--kernel-us K] [--host-us H] [--master-us M]\n"
					"       [--regions R] [--search-every E] [--search-us S] [--serial-us U] [--wait event|stream]\n"
					"       [--blocking-sync] [--blocking-event] [--no-pin]\n");
			return 2;
		}
	}
	if (steps <= 0 && seconds <= 0)
		steps = 2000;
	if (regions < 1)
		regions = 1;
	if (blocking && blocking_sync() != 0)
		FAIL("cannot set CUDA's blocking-sync mode");
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) != 0)
		FAIL("sched_getaffinity");
	double per_us = 0;
	int threads = 0;
#pragma omp parallel
	{
		if (pinned)
			pin(&set, omp_get_thread_num());
#pragma omp master
		{
			threads = omp_get_num_threads();
			per_us = units_per_us();
		}
	}
	long host = (long)(host_us * per_us / threads), master = (long)(master_us * per_us),
	     search = (long)(search_us * per_us / threads), serial = (long)(serial_us * per_us);
	int64_t kernel_ns = (int64_t)(kernel_us * 1000);

	cudaStream_t s;
	cudaEvent_t ev;
	if (cudaStreamCreate(&s) != cudaSuccess || cudaEventCreateWithFlags(&ev, event_flags) != cudaSuccess)
		FAIL("creating the stream and event");
	/* The steps' lengths, for their percentiles (the first MAX_STEPS). */
	enum { MAX_STEPS = 1 << 20 };
	float *len = (float *)malloc(MAX_STEPS * sizeof *len);
	if (len == NULL)
		FAIL("out of memory");
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	double t0 = clock_s(CLOCK_MONOTONIC), end = t0 + seconds, prev = t0;
	long n = 0;
	for (; steps > 0 ? n < steps : clock_s(CLOCK_MONOTONIC) < end; n++) {
		int searching = search_every > 0 && n % search_every == 0;
		long each = searching ? search : host;
		if (searching)
			work(serial);
		for (int k = 0; k < regions; k++) {
#pragma omp parallel
			work(each / regions);
		}
		if (launch_kernel(kernel_ns, s) != cudaSuccess || cudaEventRecord(ev, s) != cudaSuccess)
			FAIL("launch at step %ld", n);
		work(master);
		if ((stream_wait ? cudaStreamSynchronize(s) : cudaEventSynchronize(ev)) != cudaSuccess)
			FAIL("wait at step %ld", n);
		double t = clock_s(CLOCK_MONOTONIC);
		if (n < MAX_STEPS)
			len[n] = (float)((t - prev) * 1e6);
		prev = t;
	}
	double wall = clock_s(CLOCK_MONOTONIC) - t0;
	getrusage(RUSAGE_SELF, &r1);
	double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
		     (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) * 1e-6;
	long m = n < MAX_STEPS ? n : MAX_STEPS;
	qsort(len, m, sizeof *len, cmp_float);
	printf("{\"program\":\"ompsteps\",\"threads\":%d,\"steps\":%ld,\"wall_s\":%.6f,\"cpu_s\":%.6f,\"step_us\":%.2f,"
	       "\"p50_us\":%.1f,\"p90_us\":%.1f}\n",
	       threads, n, wall, cpu, wall / n * 1e6, m ? len[m / 2] : 0.0, m ? len[m * 9 / 10] : 0.0);
	return 0;
}
