/* The C side's share of the stats (stats.c): counters the wait runner
 * (wait.c) adds to and Go reads into the stats document, and the stats
 * file at exit, which Go writes (hsgo_write_stats, hsgo_write_unengaged:
 * one writer, main.go). */
#ifndef HS_STATS_H
#define HS_STATS_H
#include <stdatomic.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* hs_count_quiet counts a report skipped while the thread's CPU stayed
 * free; hs_count_report one report into Go that took spent ns. */
void hs_count_quiet(void);
void hs_count_report(int64_t spent);
/* For Go: reports skipped while a thread's CPU stayed free; reports made,
 * their total and longest wall time (ns). */
unsigned long hs_quiet_checks(void);
unsigned long hs_reports(int64_t *ns, int64_t *max_ns);
/* hs_count_event_block counts an event wait of the policy arm that blocked
 * on a shadow event for ns; hs_event_blocks returns their number and total
 * ns, for Go. */
void hs_count_event_block(int64_t ns);
unsigned long hs_event_blocks(int64_t *ns);

/* How the waits went, by kind (HS_WAIT_*): found complete, left to CUDA's
 * own wait, blocked on a shadow event, through the Go policy (the only
 * path that calls into Go: the stats' crossings say so, and
 * libhybridsync/ctest checks it). Counted per thread, in a block the thread
 * owns while it lives (no atomic read-modify-write on the wait path; a
 * block a thread left is taken by the next, whose counts add to its). */
enum { HS_PATH_READY, HS_PATH_DEVICE, HS_PATH_SHADOW, HS_PATH_POLICY, HS_PATHS };
struct hs_wait_counts {
	atomic_ulong n[3][HS_PATHS];
	struct hs_wait_counts *next;
	atomic_int free;
};
extern __thread struct hs_wait_counts *hs_my_counts __attribute__((tls_model("initial-exec")));
/* hs_wait_counts_claim gives the calling thread its block (NULL: out of
 * memory, the wait goes uncounted). */
struct hs_wait_counts *hs_wait_counts_claim(void);
static inline void hs_count_wait(int kind, int path)
{
	struct hs_wait_counts *c = hs_my_counts;
	if (c == NULL && (c = hs_wait_counts_claim()) == NULL)
		return;
	atomic_ulong *n = &c->n[kind][path];
	atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1, memory_order_relaxed);
}
/* For Go: the waits of kind that went path, all threads together. */
unsigned long hs_waits_counted(int kind, int path);

#pragma GCC visibility pop
#endif
