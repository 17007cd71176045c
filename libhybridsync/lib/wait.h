/* The wait runner (wait.c): one wait, from an entry point to its end, as
 * Go's verdicts say. Called by the entry points, api.c and interpose.c;
 * calls down into life.h, deleg.h, schedstat.h, stats.h, omplive.h, the C core
 * (core.h) and Go (hsgo_sync, hsgo_epoch), and never back up. */
#ifndef HS_WAIT_H
#define HS_WAIT_H
#include "core.h"

#pragma GCC visibility push(hidden)

/* How an entry point's wait is named. */
enum {
	HS_WAIT_PTSZ = 1, /* a stream wait whose stream 0 is the per-thread default stream */
	HS_WAIT_ONCE = 2, /* the event's record is good for this one wait (see hs_reg_event_done) */
};

/* hs_wait waits for the event, stream or context (kind HS_WAIT_*, handle
 * unused for HS_WAIT_CTX) with the configured policy, initialising on first
 * use, and returns the CUresult of the completed wait. The kernel and its
 * launch time come from kernel (0: unknown) and the launch registry. */
int hs_wait(int kind, void *handle, uint64_t kernel, int flags);

/* The same in two halves, for a caller that makes CUDA's wait itself (the
 * runtime API hooks: the runtime's own call is then the only wait): after
 * hs_wait_begin either the policy ran (the work is complete) or the wait
 * is left to CUDA; either way the caller makes its call, then calls
 * hs_wait_end. */
struct fast;
struct hs_cuda_wait {
	struct hs_wait w;
	struct fast *f; /* the kernel's delegation slot, if delegated */
	int64_t start;  /* when the wait began (0: not read) */
	int once;       /* HS_WAIT_ONCE */
};
void hs_wait_begin(struct hs_cuda_wait *c, int kind, void *handle, int flags);
void hs_wait_end(struct hs_cuda_wait *c);

/* How a wait goes (hybridsync.Route's values, which Go hands over as plain
 * ints; main.go fails to compile if the two disagree): the device's own
 * wait; the model (the device's for an unknown or delegated kernel, else
 * the policy); the policy (hsgo_sync); a shadow event's blocking wait. */
enum { HS_ROUTE_DEVICE = 0, HS_ROUTE_MODEL = 1, HS_ROUTE_POLICY = 2, HS_ROUTE_SHADOW = 3 };

/* A thread's plan in the default mode (hybridsync.Plan, Step, EpochDone):
 * what Go decided, which the epoch runner executes, and what each epoch of
 * it measured. */
#define HS_PLAN_MAX 4
struct hs_step {
	int blocking; /* the context in blocking-sync mode for the epoch */
	int event, other, event_unswitched, other_unswitched; /* HS_ROUTE_* */
};
struct hs_plan {
	int n;
	struct hs_step steps[HS_PLAN_MAX];
	int64_t len, extend, max_len;
	unsigned long min_waits;
	int64_t quiet;
	double quiet_frac;
	int64_t quiet_per_run, block_cost;
	/* libomp's blocktime (ms) for the thread to set now, -1: leave it
	 * (openmp.Blocktime.Next, omplive.h). */
	int blocktime;
};
struct hs_epoch_done {
	unsigned long waits, event_waits;
	int64_t wall, cpu, blockable; /* EpochDone.Blockable */
};
/* hs_epoch_pause pauses (1) or resumes (0) the calling thread's epoch,
 * for hs_interpose switching the wait hooks off and on. */
void hs_epoch_pause(int pause);
/* Set while the calling thread's arm needs no kernel identity: its
 * launches and records then go unobserved (interpose.c). */
extern __thread int hs_unobserved __attribute__((tls_model("initial-exec")));

#pragma GCC visibility pop
#endif
