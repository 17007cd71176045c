/* An OpenMP program whose steps are barrier-heavy, as a GROMACS step is:
 * per step the master thread sleeps SLEEP_US (as it would blocked in a
 * wait for the GPU) and does SERIAL_US of serial work, then REGIONS
 * parallel regions each run a statically scheduled loop whose share per
 * thread is about WORK_US of arithmetic (fixed work, calibrated once at
 * start alone), so every region ends in a barrier and its threads go back
 * to the runtime's pool between regions. Prints to stderr, after the
 * steps, one line:
 *   ompbarrier threads T step_us S cpu_us C
 * S the wall time per step and C the process's CPU time per step (all
 * threads), both over the steps after the first tenth (start-up left out).
 * Every region also sums an integer over its iterations; a total other
 * than the one the steps make exits 1 (the runtime's result, whatever
 * its waits).
 * OMPBARRIER_CUDA=KERNEL_US: each step also launches one kernel of that
 * length (the CUDA stand-in's runtime) before its parallel work and waits
 * for it after with cudaEventSynchronize, as GROMACS waits for its
 * nonbonded forces.
 * OMPBARRIER_DISPLAY_ENV=1: calls omp_display_env(1) first (the runtime's
 * settings as it parsed them, on stderr).
 * Built with -DOMPBARRIER_NO_CUDA it makes no CUDA call and needs no CUDA
 * library (OMPBARRIER_CUDA is then ignored): the build that runs in the
 * test guest, which has none.
 * Usage: ompbarrier STEPS [REGIONS [WORK_US [SERIAL_US [SLEEP_US]]]] */
#include <omp.h>
#include <sys/resource.h>

#include "testkit.h"

static volatile double sink;

/* n dependent multiply-adds: a fixed amount of work the compiler keeps. */
static double spin_work(long n, double x)
{
	for (long i = 0; i < n; i++)
		x = x * 1.0000001 + 1e-9;
	return x;
}

/* Iterations of spin_work per µs, measured on this thread alone. */
static double calibrate(void)
{
	long n = 1 << 16;
	double best = 0;
	for (int r = 0; r < 5; r++) {
		int64_t t0 = now_ns();
		sink = spin_work(n, 1.0);
		double per_us = n / ((now_ns() - t0) / 1e3);
		if (per_us > best)
			best = per_us;
	}
	return best;
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 500;
	int regions = argc > 2 ? atoi(argv[2]) : 8;
	double work_us = argc > 3 ? atof(argv[3]) : 10;
	double serial_us = argc > 4 ? atof(argv[4]) : 10;
	double sleep_us = argc > 5 ? atof(argv[5]) : 0;
	CHECK(steps >= 10 && regions >= 1 && work_us >= 0 && serial_us >= 0 && sleep_us >= 0,
	      "usage: ompbarrier STEPS [REGIONS [WORK_US [SERIAL_US [SLEEP_US]]]]");
	struct timespec nap = {(time_t)(sleep_us / 1e6), (long)(sleep_us * 1e3) % 1000000000L};
	const char *disp = getenv("OMPBARRIER_DISPLAY_ENV");
	if (disp && *disp == '1')
		omp_display_env(1);
#ifndef OMPBARRIER_NO_CUDA
	const char *cuda = getenv("OMPBARRIER_CUDA");
	int64_t kernel_ns = cuda ? (int64_t)(atof(cuda) * 1000) : 0;
	cudaStream_t s = NULL;
	cudaEvent_t ev = NULL;
	if (cuda) {
		CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreate(&ev) == 0, "CUDA setup");
	}
#endif

	double per_us = calibrate();
	long serial_n = (long)(serial_us * per_us);
	int threads = omp_get_max_threads();
	/* One chunk per thread and region. */
	long chunk_n = (long)(work_us * per_us);
	double acc = 0;
	long total = 0;
	int warm = steps / 10;
	int64_t t0 = 0;
	double c0 = 0;
	for (int i = 0; i < steps; i++) {
		if (i == warm) {
			t0 = now_ns();
			c0 = cpu_seconds();
		}
#ifndef OMPBARRIER_NO_CUDA
		if (cuda)
			CHECK(launch(kernel_a, kernel_ns, 1, s) == 0 && cudaEventRecord(ev, s) == 0, "launch");
#endif
		if (sleep_us > 0)
			nanosleep(&nap, NULL);
		acc = spin_work(serial_n, acc);
		for (int r = 0; r < regions; r++) {
			double part = 0;
			long sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : part, sum)
			for (int k = 0; k < threads; k++) {
				part += spin_work(chunk_n, k + r);
				sum += k + 1;
			}
			acc += part * 1e-12;
			total += sum;
		}
#ifndef OMPBARRIER_NO_CUDA
		if (cuda)
			CHECK(cudaEventSynchronize(ev) == 0, "cudaEventSynchronize");
#endif
	}
	double wall = (now_ns() - t0) / 1e9, cpu = cpu_seconds() - c0;
	int n = steps - warm;
	sink = acc;
	CHECK(total == (long)steps * regions * threads * (threads + 1) / 2, "wrong result: regions summed %ld", total);
	fprintf(stderr, "ompbarrier threads %d step_us %.1f cpu_us %.1f\n", threads, wall / n * 1e6, cpu / n * 1e6);
	return 0;
}
