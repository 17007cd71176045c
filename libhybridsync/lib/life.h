/* The library's life (life.c): initialisation, from hs_init or on first
 * use, shutdown, and the last error. Called by the public API (api.c), the
 * wait runner (wait.c, on every wait: hs_lib_ready is inline) and the stats
 * at exit (stats.c); calls down into the C core (loading CUDA) and Go
 * (hsgo_configure, hsgo_start, hsgo_shutdown). */
#ifndef HS_LIFE_H
#define HS_LIFE_H
#include <stdatomic.h>

struct hs_config;

#pragma GCC visibility push(hidden)

enum { HS_LIB_NEW = 0, HS_LIB_READY = 1, HS_LIB_DONE = 2 /* shut down, or failed to start */ };
extern atomic_int hs_lib_state;

/* hs_lib_start initialises from the environment, once: a failure is
 * remembered (and logged once), not retried on every wait. 0 when ready. */
int hs_lib_start(void);
static inline int hs_lib_ready(void)
{
	int s = atomic_load_explicit(&hs_lib_state, memory_order_acquire);
	if (s != HS_LIB_NEW)
		return s == HS_LIB_READY ? 0 : -1;
	return hs_lib_start();
}
/* hs_lib_init (re)configures from cfg (NULL: the environment alone): an
 * HS_* status. */
int hs_lib_init(const struct hs_config *cfg);
/* hs_lib_shutdown stops the primitive (Go writes the stats file): HS_OK,
 * or HS_ERR_STATE when it was not running. */
int hs_lib_shutdown(void);
/* hs_lib_error is the last failure to start ("" if none); hs_lib_set_error
 * replaces it. */
const char *hs_lib_error(void);
void hs_lib_set_error(const char *msg);

#pragma GCC visibility pop
#endif
