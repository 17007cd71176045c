/* libomp's blocktime, set live: see omplive.h. Nothing here chooses a
 * value; Go's openmp.Blocktime.Next does, in the report the thread makes
 * anyway (wait.c), and the thread calls libomp itself: the call sets the
 * blocktime of the calling thread's teams only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <unistd.h>

#include "core.h"
#include "omplive.h"
#include "ompt.h"

static void (*set_bt)(int);
static int (*get_bt)(void);
static int (*get_level)(void);
static atomic_int live;

/* The thread's blocktime: read at its first look (known), then as set. */
static __thread int known __attribute__((tls_model("initial-exec")));
static __thread int current __attribute__((tls_model("initial-exec")));

int hs_omp_live_resolve(void)
{
	/* libc's dlsym (the core's), not the interposer's, which this file
	 * is below. */
	set_bt = (void (*)(int))hs_real_dlsym(RTLD_DEFAULT, "kmp_set_blocktime");
	get_bt = (int (*)(void))hs_real_dlsym(RTLD_DEFAULT, "kmp_get_blocktime");
	get_level = (int (*)(void))hs_real_dlsym(RTLD_DEFAULT, "omp_get_level");
	return set_bt && get_bt && get_level;
}

void hs_omp_live_set(int on) { atomic_store_explicit(&live, on && set_bt && get_bt && get_level, memory_order_release); }

int hs_omp_blocktime(void)
{
	/* Where libomp runs the library as its tool, the follower sets the
	 * blocktime (ompt.c), and only it. */
	if (!atomic_load_explicit(&live, memory_order_acquire) || hs_ompt_ready() || get_level() != 0)
		return -1;
	if (!known) {
		int bt = get_bt();
		if (bt < 0)
			return -1;
		current = bt;
		known = 1;
	}
	return current;
}

void hs_omp_set_blocktime(int ms)
{
	if (ms < 0 || !known || ms == current)
		return;
	set_bt(ms);
	hs_log(HS_LOG_INFO, "tid %d: libomp blocktime %d -> %d ms", (int)gettid(), current, ms);
	current = ms;
}
