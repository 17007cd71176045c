/* Why a timed wake-up beside a busy co-runner comes late: a step loop of
 * WORK_US of CPU work and a wait of SLEEP_US, pinned to one CPU, with the
 * scheduler's default slice or a custom EEVDF slice of SLICE_US
 * (sched_setattr's sched_runtime, what `agent --mitigate slice=` sets).
 * The wait is a timed sleep on the loop's CPU (clock_nanosleep to an
 * absolute deadline; "late" is after the deadline), or with "remote" a
 * read() that a thread on another CPU ends at the deadline, as a GPU's
 * completion interrupt does ("late" is after that thread's write). It
 * prints how late the wake-ups ran, the CPU share the loop got, and the
 * share it asked for (WORK_US over WORK_US + SLEEP_US). timerlag.sh runs
 * it beside `while1` at several duties.
 *
 *   gcc -O2 -o timerlag timerlag.c -lpthread
 *   ./timerlag CPU WORK_US SLEEP_US SECONDS SLICE_US [remote]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sched_attr_v1 {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
};

static int64_t ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof set, &set);
}

/* The remote waker: told a deadline through req, it sleeps to it on its
 * own CPU, notes when it writes, and writes done. */
static int req, done, waker_cpu;
static _Atomic int64_t due_at, wrote_at;

static void *waker(void *arg)
{
	(void)arg;
	pin(waker_cpu);
	for (uint64_t v;;) {
		if (read(req, &v, sizeof v) != sizeof v) return NULL;
		int64_t due = atomic_load(&due_at);
		struct timespec d = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) != 0)
			;
		atomic_store(&wrote_at, ns(CLOCK_MONOTONIC));
		v = 1;
		if (write(done, &v, sizeof v) != sizeof v) return NULL;
	}
}

/* wait sleeps until due, here or through the waker, and returns how late
 * the loop ran. */
static int64_t wait_until(int64_t due, int remote)
{
	if (!remote) {
		struct timespec d = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) != 0)
			;
		return ns(CLOCK_MONOTONIC) - due;
	}
	uint64_t v = 1;
	atomic_store(&due_at, due);
	if (write(req, &v, sizeof v) != sizeof v || read(done, &v, sizeof v) != sizeof v) {
		perror("timerlag: eventfd");
		exit(1);
	}
	return ns(CLOCK_MONOTONIC) - atomic_load(&wrote_at);
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 6 || argc > 7 || (argc == 7 && strcmp(argv[6], "remote") != 0)) {
		fprintf(stderr, "usage: timerlag CPU WORK_US SLEEP_US SECONDS SLICE_US (0: the default slice) [remote]\n");
		return 2;
	}
	int cpu = atoi(argv[1]), remote = argc == 7;
	int64_t work = atoll(argv[2]) * 1000, sleep = atoll(argv[3]) * 1000;
	int64_t dur = (int64_t)(atof(argv[4]) * 1e9), slice = atoll(argv[5]) * 1000;
	if (remote) {
		waker_cpu = cpu == 0 ? 1 : 0;
		req = eventfd(0, 0);
		done = eventfd(0, 0);
		pthread_t t;
		if (req < 0 || done < 0 || pthread_create(&t, NULL, waker, NULL) != 0) {
			perror("timerlag: the remote waker");
			return 1;
		}
	}
	pin(cpu);
	if (slice > 0) {
		struct sched_attr_v1 a = {.size = sizeof a, .policy = SCHED_OTHER, .runtime = (uint64_t)slice};
		if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) {
			perror("timerlag: sched_setattr (a custom slice needs Linux 6.12 and root)");
			return 1;
		}
	}
	size_t cap = (size_t)(dur / (work + sleep)) + 16, n = 0;
	int64_t *late = malloc(cap * sizeof *late);
	if (!late) return 1;
	int64_t t0 = ns(CLOCK_MONOTONIC), c0 = ns(CLOCK_THREAD_CPUTIME_ID);
	while (n < cap && ns(CLOCK_MONOTONIC) - t0 < dur) {
		/* WORK_US of CPU time, not wall time: under contention the step
		 * still needs the same work. */
		for (int64_t c = ns(CLOCK_THREAD_CPUTIME_ID); ns(CLOCK_THREAD_CPUTIME_ID) - c < work;)
			;
		late[n++] = wait_until(ns(CLOCK_MONOTONIC) + sleep, remote);
	}
	double wall = (ns(CLOCK_MONOTONIC) - t0) / 1e9, got = (ns(CLOCK_THREAD_CPUTIME_ID) - c0) / 1e9;
	double mean = 0;
	size_t over = 0;
	for (size_t i = 0; i < n; i++) {
		mean += late[i];
		over += late[i] > 100000;
	}
	qsort(late, n, sizeof *late, cmp);
	printf("wake=%s work_us=%lld sleep_us=%lld slice_us=%lld asked=%.2f got=%.2f steps=%zu step_us=%.0f "
	       "late_us mean=%.1f p50=%.1f p75=%.1f p90=%.1f p99=%.1f max=%.1f over100us=%.3f\n",
	       remote ? "remote" : "timer", (long long)(work / 1000), (long long)(sleep / 1000), (long long)(slice / 1000),
	       (double)work / (work + sleep), got / wall, n, wall / n * 1e6, mean / n / 1e3,
	       late[n / 2] / 1e3, late[n * 3 / 4] / 1e3, late[n * 9 / 10] / 1e3, late[n * 99 / 100] / 1e3,
	       late[n - 1] / 1e3, (double)over / n);
	free(late);
	return 0;
}
