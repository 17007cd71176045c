/* The waiter of BENCHMARKS.md, "Agent and library together": wake-up latency of a
 * thread blocked in read() on CPU 1, written to every 1 ms from CPU 0.
 * gcc -O2 -o wake wake.c -lpthread
 *
 *   taskset -c 1 sh -c 'while :; do :; done' & CR=$!
 *   ./wake & sudo ./vgpu-probe agent --pid $! --once 9s >/dev/null                          # off
 *   ./wake & sudo ./vgpu-probe agent --pid $! --once 9s --mitigate slice=100us >/dev/null  # on
 *   kill $CR */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static int fd[2];
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); sched_setaffinity(0, sizeof s, &s); }
static void *writer(void *x) { pin(0); for (;;) { long long t = now(); write(fd[1], &t, 8); struct timespec d = {0, 1000000}; nanosleep(&d, 0); } }
static int cmp(const void *a, const void *b) { long long x = *(long long *)a, y = *(long long *)b; return x < y ? -1 : x > y; }
int main(void) {
	pipe(fd); pin(1); pthread_t w; pthread_create(&w, 0, writer, 0);
	static long long lat[100000]; int n = 0; long long start = now();
	for (;;) {
		long long t; read(fd[0], &t, 8); long long l = now() - t, el = now() - start;
		if (el > 8000000000LL) break;
		if (el > 3000000000LL && n < 100000) lat[n++] = l; /* 3 s to 8 s */
	}
	qsort(lat, n, 8, cmp); double s = 0; for (int i = 0; i < n; i++) s += lat[i];
	printf("n=%d mean=%.1fus p50=%.1fus p90=%.1fus p99=%.1fus\n", n, s / n / 1e3, lat[n / 2] / 1e3, lat[n * 9 / 10] / 1e3, lat[n * 99 / 100] / 1e3);
	return 0;
}
