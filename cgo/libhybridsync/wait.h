/* Shared by the C API and the interposer. */
#ifndef HS_WAIT_H
#define HS_WAIT_H
#include "core.h"
/* hs_wait runs the configured policy on w (initialising on first use) and
 * returns the CUresult of the completed wait. */
int hs_wait(struct hs_wait *w);
/* The already-complete waits counted in C, by kernel (see api.c). */
int hs_fast_get(int i, uint64_t *kernel, unsigned long *n, unsigned long *deleg);
void hs_fast_reset(void);
/* The waits left to CUDA's own synchronize (see api.c): on in the default
 * mode, per kernel as the policy learns its waits are short (completing
 * within short_wait_ns of their launch). */
void hs_delegate_mode(int on, int64_t short_wait_ns);
void hs_delegate_set(uint64_t kernel, int on);
#define HS_FAST_SLOTS 1024
#endif
