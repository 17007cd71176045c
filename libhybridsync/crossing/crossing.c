/* The C side of the crossing benchmarks: a thread C creates calls n times,
 * after gap ns of busy work each, either into Go (crossingGo) or into an
 * empty C function, timing the calls alone. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

#include "_cgo_export.h"

__attribute__((noinline)) int crossing_nop(void)
{
	__asm__ volatile("");
	return 1;
}

static int64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long switches(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

struct job {
	long n;
	int64_t gap, ns;
	long sw;
	int go;
};

static void *run(void *arg)
{
	struct job *j = arg;
	if (j->go)
		crossingGo(); /* the thread's first call binds it to the Go runtime */
	long sw = switches();
	int64_t spent = 0;
	for (long i = 0; i < j->n; i++) {
		if (j->gap > 0)
			for (int64_t until = now() + j->gap; now() < until;)
				;
		int64_t t = now();
		if (j->go)
			crossingGo();
		else
			crossing_nop();
		spent += now() - t;
	}
	j->ns = spent;
	j->sw = switches() - sw;
	return NULL;
}

static int on_thread(long n, int64_t gap, int go, int64_t *ns, long *sw)
{
	struct job j = {.n = n, .gap = gap, .go = go};
	pthread_t t;
	if (pthread_create(&t, NULL, run, &j) != 0)
		return -1;
	pthread_join(t, NULL);
	*ns = j.ns;
	*sw = j.sw;
	return 0;
}

int crossing_from_c(long n, int64_t gap, int64_t *ns, long *sw) { return on_thread(n, gap, 1, ns, sw); }
int crossing_in_c(long n, int64_t gap, int64_t *ns, long *sw) { return on_thread(n, gap, 0, ns, sw); }
