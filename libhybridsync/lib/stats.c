/* The C side's share of the stats: see stats.h. Calls life.h (the state
 * and the last error) and Go, which writes the file. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "_cgo_export.h"
#include "core.h"
#include "life.h"
#include "gompspin.h"
#include "stats.h"

static atomic_ulong quiet_checks; /* reports skipped by the wait runner's still_free */
/* Reports made into Go, and the wall time the calling thread spent in
 * them: a crossing wakes the Go runtime's threads, which on a contended
 * CPU can wait behind the co-runner. */
static atomic_ulong reports;
static _Atomic int64_t report_ns, report_max_ns;

void hs_count_quiet(void) { atomic_fetch_add_explicit(&quiet_checks, 1, memory_order_relaxed); }

void hs_count_report(int64_t spent)
{
	atomic_fetch_add_explicit(&reports, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&report_ns, spent, memory_order_relaxed);
	int64_t m = atomic_load_explicit(&report_max_ns, memory_order_relaxed);
	while (spent > m && !atomic_compare_exchange_weak(&report_max_ns, &m, spent))
		;
}

unsigned long hs_quiet_checks(void) { return atomic_load(&quiet_checks); }

static atomic_ulong event_blocks;
static _Atomic int64_t event_block_ns;

void hs_count_event_block(int64_t ns)
{
	atomic_fetch_add_explicit(&event_blocks, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&event_block_ns, ns, memory_order_relaxed);
}

unsigned long hs_event_blocks(int64_t *ns)
{
	*ns = atomic_load(&event_block_ns);
	return atomic_load(&event_blocks);
}

unsigned long hs_reports(int64_t *ns, int64_t *max_ns)
{
	*ns = atomic_load(&report_ns);
	*max_ns = atomic_load(&report_max_ns);
	return atomic_load(&reports);
}

__thread struct hs_wait_counts *hs_my_counts __attribute__((tls_model("initial-exec")));
static _Atomic(struct hs_wait_counts *) counts_list;
static pthread_key_t counts_key;
static pthread_once_t counts_once = PTHREAD_ONCE_INIT;

/* A thread that exits leaves its block to the next that claims one. */
static void counts_release(void *p) { atomic_store(&((struct hs_wait_counts *)p)->free, 1); }
static void counts_init(void) { pthread_key_create(&counts_key, counts_release); }

struct hs_wait_counts *hs_wait_counts_claim(void)
{
	pthread_once(&counts_once, counts_init);
	struct hs_wait_counts *c = NULL;
	for (struct hs_wait_counts *p = atomic_load(&counts_list); p && !c; p = p->next) {
		int one = 1;
		if (atomic_compare_exchange_strong(&p->free, &one, 0))
			c = p;
	}
	if (c == NULL) {
		if ((c = calloc(1, sizeof *c)) == NULL)
			return NULL;
		c->next = atomic_load(&counts_list);
		while (!atomic_compare_exchange_weak(&counts_list, &c->next, c))
			;
	}
	pthread_setspecific(counts_key, c);
	hs_my_counts = c;
	return c;
}

unsigned long hs_waits_counted(int kind, int path)
{
	if (kind < 0 || kind >= 3 || path < 0 || path >= HS_PATHS)
		return 0;
	unsigned long n = 0;
	for (struct hs_wait_counts *p = atomic_load(&counts_list); p; p = p->next)
		n += atomic_load_explicit(&p->n[kind][path], memory_order_relaxed);
	return n;
}

/* The stats file at exit: only in the process that initialised (a forked
 * child that exits must not overwrite its parent's file, nor call into a
 * Go runtime whose threads it does not have). A process whose first wait
 * found the library unable to start says so ("engaged": false and why), so
 * that a user who asked for stats is told rather than left to wonder why
 * the numbers are missing; one that never waited writes nothing (it may
 * never have used CUDA at all), unless the library followed its OpenMP
 * waits. */
__attribute__((destructor)) static void write_stats_at_exit(void)
{
	if (hs_in_forked_child())
		return;
	switch (atomic_load(&hs_lib_state)) {
	case HS_LIB_READY:
		hsgo_write_stats();
		break;
	case HS_LIB_DONE:
		if (hs_lib_error()[0])
			hsgo_write_unengaged((char *)hs_lib_error());
		break;
	case HS_LIB_NEW:
		/* Without a CUDA wait, what the library did to the program's
		 * OpenMP is still worth the file (ompfollow.go). */
		if (__atomic_load_n(&hs_gomp_following, __ATOMIC_ACQUIRE))
			hsgo_write_unengaged("the program made no CUDA wait");
		break;
	}
}
