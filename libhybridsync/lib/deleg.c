/* The delegation table: see deleg.h. Written by the wait runner (counts,
 * an ended delegation) and by Go (the mode, a kernel's delegation); read
 * by both. Calls nothing. */
#include "deleg.h"

struct fast hs_fast[HS_FAST_SLOTS];
atomic_ulong hs_fast_lost;
atomic_int hs_delegating;
_Atomic int64_t hs_short_ns, hs_done_at_start_ns;

void hs_delegate_mode(int on, int64_t short_ns, int64_t done_at_start_ns)
{
	atomic_store(&hs_short_ns, short_ns);
	atomic_store(&hs_done_at_start_ns, done_at_start_ns);
	atomic_store(&hs_delegating, on);
}

void hs_delegate_set(uint64_t kernel, int on)
{
	struct fast *f = hs_fast_slot(kernel, 1);
	if (f && (int)atomic_load_explicit(&f->on, memory_order_relaxed) != on)
		atomic_store_explicit(&f->on, on, memory_order_relaxed);
}

int hs_fast_get(int i, uint64_t *kernel, unsigned long *n, unsigned long *deleg)
{
	if (i < 0 || i >= HS_FAST_SLOTS)
		return 0;
	uint64_t id = atomic_load(&hs_fast[i].id);
	if (id == 0)
		return 0;
	*kernel = id - 1;
	*n = atomic_load(&hs_fast[i].n);
	*deleg = atomic_load(&hs_fast[i].deleg);
	return 1;
}

void hs_fast_reset(void)
{
	for (int i = 0; i < HS_FAST_SLOTS; i++) {
		atomic_store(&hs_fast[i].n, 0);
		atomic_store(&hs_fast[i].deleg, 0);
		atomic_store(&hs_fast[i].on, 0);
	}
}
