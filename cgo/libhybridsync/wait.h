/* Shared by the C API and the interposer. */
#ifndef HS_WAIT_H
#define HS_WAIT_H
#include "core.h"
/* hs_wait runs the configured policy on w (initialising on first use) and
 * returns the CUresult of the completed wait. */
int hs_wait(struct hs_wait *w);
/* The same in two halves, for a caller that makes CUDA's wait itself (the
 * runtime API hooks: the runtime's own call is then the only wait).
 * hs_wait_begin returns 0 when it ran the policy (c->rc its result; the
 * work is complete), 1 when the wait is left to CUDA: the caller makes it,
 * then calls hs_wait_end. */
struct fast;
struct hs_cuda_wait {
	struct fast *f;      /* the kernel's delegation slot, if delegated */
	int64_t start; /* when the wait began (0: not read) */
	int rc;
};
int hs_wait_begin(struct hs_wait *w, struct hs_cuda_wait *c);
void hs_wait_end(struct hs_wait *w, const struct hs_cuda_wait *c);
/* A thread's epochs in the default mode (hybridsync.Epoch, EpochDone):
 * the plan Go gives, and what each epoch of it measured. */
#define HS_PLAN_MAX 4
struct hs_plan {
	int n, arms[HS_PLAN_MAX];
	int64_t len, max_len;
	unsigned long min_waits;
	int64_t quiet, quiet_per_run;
};
struct hs_epoch_done {
	unsigned long waits;
	int64_t wall, cpu, blockable; /* EpochDone.Blockable */
};
/* The already-complete waits counted in C, by kernel (see api.c). */
int hs_fast_get(int i, uint64_t *kernel, unsigned long *n, unsigned long *deleg);
void hs_fast_reset(void);
/* The waits left to CUDA's own synchronize (see api.c): on in the default
 * mode, per kernel as the policy learns its waits are short (completing
 * within short_wait_ns of their launch). */
void hs_delegate_mode(int on, int64_t short_wait_ns);
void hs_epoch_pause(int pause);
void hs_delegate_set(uint64_t kernel, int on);
/* Set while the calling thread's arm needs no kernel identity (api.c): its
 * launches and records then go unobserved. */
extern __thread int hs_unobserved __attribute__((tls_model("initial-exec")));
/* Reports to Go skipped while a thread's CPU stayed free (api.c). */
unsigned long hs_quiet_checks(void);
/* Reports made into Go, their total and longest wall time (ns). */
unsigned long hs_reports(int64_t *ns, int64_t *max_ns);
#define HS_FAST_SLOTS 1024
#endif
