/* The delegation table (deleg.c): per kernel, whether its waits are left
 * to the device (CUDA's own synchronize), and the counts of waits that
 * never reached the Go policy. A leaf: it calls nothing. The wait runner
 * (wait.c) reads it on every wait, so the lookups are inline here, and
 * records the policy's verdicts that hsgo_sync returns; Go (hsgo_start, the
 * stats) sets and reads it through deleg.c. */
#ifndef HS_DELEG_H
#define HS_DELEG_H
#include <stdatomic.h>
#include <stdint.h>
#include "core.h"

#pragma GCC visibility push(hidden)

/* Waits on work already complete never reach Go: the query that every
 * policy starts with says done, and the call is counted here (merged into
 * the stats by hsgo_stats_json). Crossing into Go costs more than the
 * query itself; this keeps hs_sync on a completed event within tens of ns
 * of cuEventQuery. Such a wait teaches the timing dictionary nothing: the
 * completion time is unknown, only bounded.
 *
 * Nor do short waits, in the default mode: once the policy has learned
 * that a kernel's waits are short (hs_delegate_set, from Go), they go to
 * CUDA's own synchronize, with the context's own schedule, as if the
 * library were not there. The wait runner times them (to the wait's return
 * from the kernel's launch, or its event's record, or for a stream wait
 * the wait's start: see core.c): one that ends later than the policy's
 * short-wait bound ends the delegation, and that kernel's next waits go
 * through the policy again, which learns its new timing. Such waits are
 * CUDA's because a decision per wait costs more than it can save on them
 * (docs/tried.md: "Every wait through the Go policy").
 *
 * Calls into Go are kept off these waits for a second reason: a call from
 * a C thread into Go wakes the Go runtime's threads, the more the longer
 * the thread ran in C since its last call (docs/architecture.md, "One
 * wait", has what a call costs), on the program's own CPU when it is
 * pinned. So Go's verdict on a
 * kernel's waits is kept here, and read with no call. A wait with no known
 * kernel goes to CUDA too (hybridsync.RouteModel). */
struct fast {
	_Atomic uint64_t id; /* kernel id + 1, so that kernel 0 has a slot */
	atomic_ulong n;      /* already complete */
	atomic_ulong deleg;  /* left to CUDA's own wait */
	atomic_uint on;      /* delegate this kernel's waits */
};
#define HS_FAST_SLOTS 1024
#define HS_FAST_PROBE 16
extern struct fast hs_fast[HS_FAST_SLOTS];
extern atomic_ulong hs_fast_lost;
extern atomic_int hs_delegating;     /* the default mode is configured */
/* hybridsync.Delegation: a delegated wait ending later than short_ns after
 * its launch is long, unless it returned within done_at_start_ns of its
 * start (it found the work all but complete: its time says nothing). */
extern _Atomic int64_t hs_short_ns, hs_done_at_start_ns;

/* hs_fast_slot finds (or, with create, claims) the kernel's slot; NULL
 * when its probe window is full, which only loses counts. */
static inline struct fast *hs_fast_slot(uint64_t kernel, int create)
{
	uint64_t key = kernel + 1;
	for (int i = 0; i < HS_FAST_PROBE; i++) {
		struct fast *f = &hs_fast[((key * 0x9e3779b97f4a7c15ull >> 54) + i) & (HS_FAST_SLOTS - 1)];
		uint64_t cur = atomic_load_explicit(&f->id, memory_order_relaxed);
		if (cur == 0 && create && atomic_compare_exchange_strong(&f->id, &cur, key))
			cur = key;
		if (cur == key)
			return f;
		if (cur == 0)
			return NULL;
	}
	return NULL;
}

/* hs_fast_count counts a wait of kernel that was already complete (deleg
 * 0) or left to CUDA's own wait (deleg 1). */
static inline void hs_fast_count(uint64_t kernel, int deleg)
{
	struct fast *f = hs_fast_slot(kernel, 1);
	if (f)
		atomic_fetch_add_explicit(deleg ? &f->deleg : &f->n, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&hs_fast_lost, 1, memory_order_relaxed);
}

/* hs_delegated returns the kernel's slot if its waits are left to CUDA's
 * own wait, else NULL (no known kernel: also CUDA's, without a slot). */
static inline struct fast *hs_delegated(uint64_t kernel)
{
	struct fast *f = kernel ? hs_fast_slot(kernel, 0) : NULL;
	return f && atomic_load_explicit(&f->on, memory_order_relaxed) ? f : NULL;
}

/* hs_delegated_check ends the delegation of w's kernel when its wait,
 * which started at start and returned at end, completed later after the
 * launch than a short wait does. */
static inline void hs_delegated_check(struct fast *f, const struct hs_wait *w, int64_t start, int64_t end)
{
	if (f == NULL || w->launched <= 0)
		return;
	if (end - start > atomic_load_explicit(&hs_done_at_start_ns, memory_order_relaxed) &&
	    end - w->launched > atomic_load_explicit(&hs_short_ns, memory_order_relaxed))
		atomic_store_explicit(&f->on, 0, memory_order_relaxed);
}

/* hs_delegate_mode (Go) turns delegation and plans on (the default mode)
 * with Go's bounds (hybridsync.Delegation); hs_delegate_set (wait.c) sets one kernel's
 * delegation as the policy learns whether its waits are short;
 * hs_fast_get reads slot i (1 and its kernel and counts when used);
 * hs_fast_reset clears counts and delegations for a new configuration. */
void hs_delegate_mode(int on, int64_t short_ns, int64_t done_at_start_ns);
void hs_delegate_set(uint64_t kernel, int on);
int hs_fast_get(int i, uint64_t *kernel, unsigned long *n, unsigned long *deleg);
void hs_fast_reset(void);

#pragma GCC visibility pop
#endif
