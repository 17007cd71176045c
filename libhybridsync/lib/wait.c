/* The policy core: one wait, from an entry point (api.c, interpose.c) to
 * its end. It names the wait's kernel and launch time from the launch
 * registry, takes the thread's arm for it from its epochs (below), and then
 * either leaves the wait to CUDA's own (counted in the delegation table)
 * or runs it through the Go policy (hsgo_sync) over the C core's waits.
 * Calls, in that order: core.h (the registry), life.h (initialise on first
 * use), the epoch engine (schedstat.h, stats.h, Go's hsgo_epoch at a
 * plan's end), deleg.h, core.h (query, CUDA's wait) and Go (hsgo_sync);
 * nothing calls back up into it but Go's Sync, through core.h's waits. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "_cgo_export.h"
#include "core.h"
#include "deleg.h"
#include "life.h"
#include "schedstat.h"
#include "stats.h"
#include "wait.h"

/* The thread's epochs, in the default mode: which arm its waits take (see
 * hybridsync.ArmChooser), how many waits it made since the running epoch
 * began, and when that ends. The epochs of a plan run back to back and
 * are reported to Go together at its end (hybridsync.Epoch says why), so
 * the cost per wait is one clock read. The arms: the model (short waits
 * to CUDA, the rest through the policy); CUDA's own wait with the
 * program's schedule (CUDA's default mode); the policy, which on a
 * contended CPU is CUDA's blocking-sync mode: the context is switched to
 * it and its stream and context waits left to CUDA, while its event
 * waits, which that mode leaves spinning, block on shadow events
 * (block_event; where the driver cannot switch, the Go policy blocks on a
 * shadow event for every wait); and blocking, CUDA's blocking-sync mode
 * as CUDA runs it, event waits spinning (or, where the driver cannot
 * switch, the policy's). */
struct epoch {
	int64_t due;        /* when the running epoch's time is up */
	int64_t start, cpu; /* its start, and the thread's CPU time then */
	unsigned long waits, event_waits;
	int64_t blockable_ns; /* its waits' wall time beyond BLOCK_COST_NS each */
	int arm;
	int cuda_blocking; /* the context is in blocking-sync mode for this arm */
	struct hs_plan plan;
	int step; /* the running epoch's index in plan */
	struct hs_epoch_done done[HS_PLAN_MAX];
	/* While the CPU is free (Epoch.Quiet in hybridsync/armchooser.go):
	 * until when reports may be skipped, the run delay and
	 * schedulings-in at the last check, and when that was. */
	int64_t quiet_until, delay, runs, delay_at;
	/* While the thread's wait hooks are off (hs_epoch_pause): since
	 * when, and its CPU time then; 0 when not paused. */
	int64_t paused_at, paused_cpu;
};
static __thread struct epoch epoch __attribute__((tls_model("initial-exec")));

/* Only the model arm, and the policy where CUDA cannot block for it, use
 * what a launch or record tells (the kernel, its time); in the others every
 * wait is CUDA's own. A thread in those skips observing its launches,
 * which cost a launch-bound program enough to make it slower than CUDA's
 * default under contention, whose arm it was running (docs/BENCHMARKS.md,
 * "What the library's parts cost": "Launch observers, in one process"). A thread that
 * launches and never waits has no epoch and observes all along. */
__thread int hs_unobserved __attribute__((tls_model("initial-exec")));

/* blocking_arm: the arm runs the context in CUDA's blocking-sync mode. */
static int blocking_arm(int arm)
{
	return arm == HS_ARM_POLICY || arm == HS_ARM_BLOCKING;
}

static void set_arm(int arm)
{
	int blocking = blocking_arm(arm) && hs_core_sched_blocking(1) == 0;
	if (!blocking && epoch.cuda_blocking)
		hs_core_sched_blocking(0);
	epoch.arm = arm;
	epoch.cuda_blocking = blocking;
	hs_unobserved = arm == HS_ARM_DEVICE || blocking;
}

/* still_free tells whether the thread may skip this report: its CPU was
 * free at the last one, that was under Epoch.Quiet ago, and since the last
 * check its run delay grew by under 1% of the time, or by under
 * Epoch.QuietPerRun per scheduling-in (a thread that sleeps often waits a
 * little at each wake-up, tens of µs in a VM, with no competitor). The Go
 * side (hybridsync.SchedSignal) calls contention only from 2% and twice
 * that per run, and a throttle shows as run delay too, so only the Go call
 * is saved: a report crosses into Go, whose runtime threads then wake on
 * the program's CPU (hundreds of context switches a second). */
static int still_free(int64_t now)
{
	int64_t d, r;
	if (now >= epoch.quiet_until || !hs_run_delay(&d, &r))
		return 0;
	int64_t grew = d - epoch.delay, runs = r - epoch.runs;
	int flat = grew * 100 < now - epoch.delay_at || (runs > 0 && grew < epoch.plan.quiet_per_run * runs);
	epoch.delay = d;
	epoch.runs = r;
	epoch.delay_at = now;
	if (flat)
		hs_count_quiet();
	return flat;
}

/* log_report says at HYBRIDSYNC_LOG=debug what the thread's epochs
 * measured (arm, waits, wall and CPU time) and the plan Go gave next. */
static void log_report(const struct hs_plan *ran, int n)
{
	static const char *const names[] = {"model", "device", "policy", "blocking"};
#define ARM_NAME(a) ((a) >= 0 && (a) < 4 ? names[(a)] : "?")
	char buf[400];
	int k = n > 0 ? 0 : snprintf(buf, sizeof buf, "none");
	for (int i = 0; i < n && i < HS_PLAN_MAX && k < (int)sizeof buf; i++) {
		const struct hs_epoch_done *d = &epoch.done[i];
		k += snprintf(buf + k, sizeof buf - k, "%s%s %lu waits %.1f ms cpu %.1f ms", i ? ", " : "",
			      ARM_NAME(ran->arms[i]), d->waits, d->wall / 1e6, d->cpu / 1e6);
	}
	for (int i = 0; i < epoch.plan.n && i < HS_PLAN_MAX && k < (int)sizeof buf; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%s", i ? " " : "; next ", ARM_NAME(epoch.plan.arms[i]));
#undef ARM_NAME
	hs_log(HS_LOG_DEBUG, "tid %d epochs: %s, %.1f ms each", (int)gettid(), buf, epoch.plan.len / 1e6);
}

/* report hands the plan's epochs to Go, at now, and takes the next plan. */
static void report(int64_t now)
{
	struct hs_plan ran = epoch.plan;
	hsgo_epoch(epoch.step, epoch.done, now, &epoch.plan);
	if (hs_log_enabled(HS_LOG_DEBUG))
		log_report(&ran, epoch.step);
	hs_count_report(hs_now() - now);
	epoch.step = 0;
	if (epoch.plan.n < 1 || epoch.plan.n > HS_PLAN_MAX || epoch.plan.len <= 0)
		epoch.plan = (struct hs_plan){.n = 1, .len = 1000000000};
	epoch.quiet_until = 0;
	if (epoch.plan.quiet > 0 && hs_run_delay(&epoch.delay, &epoch.runs)) {
		epoch.quiet_until = now + epoch.plan.quiet;
		epoch.delay_at = now;
	}
}

/* next_epoch ends the running epoch at now (if one ran), and starts the
 * plan's next, reporting first when the plan is done. */
static void next_epoch(int64_t now)
{
	int64_t cpu = hs_thread_cpu();
	if (epoch.plan.n > 0) /* report() keeps n within HS_PLAN_MAX */
		epoch.done[epoch.step++] = (struct hs_epoch_done){epoch.waits, epoch.event_waits, now - epoch.start,
								  cpu - epoch.cpu, epoch.blockable_ns};
	if (epoch.step >= epoch.plan.n)
		report(now);
	int arm = epoch.plan.arms[epoch.step];
	if (arm != epoch.arm || (blocking_arm(arm) && !epoch.cuda_blocking))
		set_arm(arm);
	epoch.start = now;
	epoch.cpu = cpu;
	epoch.waits = 0;
	epoch.event_waits = 0;
	epoch.blockable_ns = 0;
	epoch.due = now + epoch.plan.len;
}

/* epoch_arm returns the arm of the thread's wait starting now, and sets
 * *now to the time it read (0 outside the default mode, which reads none). */
static int epoch_arm(int64_t *now_out)
{
	*now_out = 0;
	if (!atomic_load_explicit(&hs_delegating, memory_order_relaxed))
		return HS_ARM_POLICY;
	epoch.waits++;
	int64_t now = hs_now();
	*now_out = now;
	if (now < epoch.due)
		return epoch.arm;
	if (still_free(now)) {
		epoch.due = now + epoch.plan.len;
		return epoch.arm;
	}
	/* Too few waits for a rate (Epoch.MinWaits): the epoch goes on. */
	if (epoch.waits < epoch.plan.min_waits && now - epoch.start < epoch.plan.max_len) {
		epoch.due = now + epoch.plan.len / 4;
		return epoch.arm;
	}
	next_epoch(now);
	return epoch.arm;
}

/* hs_epoch_pause: the time and CPU spent paused are left out of the
 * running epoch, so what the epoch reports measures only its own arm, and
 * a context the arm switched to blocking-sync goes back to the program's
 * schedule while paused (the waits are then CUDA's alone, in the program's
 * own mode). Used to compare the library with CUDA's two modes inside one
 * process (experiments/apps/inproc.py), where separate processes vary more
 * than the difference looked for. */
void hs_epoch_pause(int pause)
{
	if (!atomic_load_explicit(&hs_delegating, memory_order_relaxed) || epoch.plan.n == 0)
		return;
	if (pause) {
		if (epoch.paused_at)
			return;
		epoch.paused_at = hs_now();
		epoch.paused_cpu = hs_thread_cpu();
		if (epoch.cuda_blocking)
			hs_core_sched_blocking(0);
		epoch.cuda_blocking = 0;
		return;
	}
	if (!epoch.paused_at)
		return;
	int64_t gap = hs_now() - epoch.paused_at;
	epoch.start += gap;
	epoch.due += gap;
	epoch.cpu += hs_thread_cpu() - epoch.paused_cpu;
	epoch.paused_at = 0;
	if (blocking_arm(epoch.arm))
		set_arm(epoch.arm);
}

/* ---- one wait ---- */

/* identify names the wait: kernel (hs_sync's argument) or, failing that,
 * the last launch the registry holds for the event or stream (a context
 * wait: the legacy stream's), and that launch's time. */
static void identify(struct hs_wait *w, int kind, void *handle, uint64_t kernel, int flags)
{
	*w = (struct hs_wait){.handle = handle, .kind = kind, .ptsz = (flags & HS_WAIT_PTSZ) != 0, .kernel = kernel};
	uint64_t k;
	int64_t t;
	if (kind == HS_WAIT_EVENT) {
		if (kernel)
			w->launched = hs_reg_kernel_launched(kernel);
		else if (hs_reg_event(handle, &k, &t))
			w->kernel = k, w->launched = t;
		return;
	}
	void *stream = kind == HS_WAIT_CTX ? NULL : handle == NULL && w->ptsz ? (void *)HS_CU_STREAM_PER_THREAD : handle;
	if (hs_reg_stream(stream, &k, &t) && (kernel == 0 || k == kernel))
		w->kernel = k, w->launched = t;
	else if (kernel)
		w->launched = hs_reg_kernel_launched(kernel);
}

/* to_cuda reports whether this unfinished wait goes to CUDA's own wait,
 * and counts it if so; *f is set to the kernel's slot when the model arm
 * delegated it (to be checked when it returns). */
static int to_cuda(int arm, uint64_t kernel, struct fast **f)
{
	*f = NULL;
	int cuda = arm == HS_ARM_DEVICE || (blocking_arm(arm) && epoch.cuda_blocking);
	if (!cuda && arm == HS_ARM_MODEL)
		cuda = kernel == 0 || (*f = hs_delegated(kernel)) != NULL;
	if (cuda)
		hs_fast_count(kernel, 1);
	return cuda;
}

/* through_policy runs the policy on w, which started at start (0: not
 * read): work already complete returns at once, counted here. */
static int through_policy(struct hs_wait *w, int64_t start)
{
	int pending = 0;
	if (w->kind != HS_WAIT_CTX) {
		int q = hs_core_query(w);
		if (q == 0) {
			hs_fast_count(w->kernel, 0);
			return 0;
		}
		/* An error goes through the policy's own query, which
		 * returns it. */
		pending = q == HS_CUDA_ERROR_NOT_READY;
	}
	/* An observed launch has no time (core.c): the wait counts from its
	 * start. */
	if (w->kernel && w->launched == 0)
		w->launched = start ? start : hs_now();
	int is_short;
	int r = hsgo_sync(w, pending, &is_short);
	if (is_short >= 0)
		hs_delegate_set(w->kernel, is_short);
	/* Not configured (shut down meanwhile): CUDA's own wait. An error,
	 * or a context-wide wait (whose query covers only the legacy
	 * stream): the real synchronize on the finished work gives the
	 * exact result. */
	if (r != 0 || w->kind == HS_WAIT_CTX)
		r = hs_core_finish(w);
	return r;
}

/* block_event is the policy arm's event wait. The schedule that arm sets
 * makes CUDA's stream and context waits block, but an event wait spins
 * unless its event was created blocking (core.c), and programs that wait on
 * their own events (GROMACS does, after every step's forces) would spin
 * through every wait in the arm meant to give the CPU back. So an
 * unfinished event blocks on a shadow event that completes with it. */
static int block_event(struct hs_wait *w)
{
	int r = hs_core_query(w);
	/* Counted as the arm's other waits are (left to CUDA, or found
	 * done), so every wait stays in the stats once. */
	hs_fast_count(w->kernel, r == HS_CUDA_ERROR_NOT_READY);
	if (r != HS_CUDA_ERROR_NOT_READY)
		return r == 0 ? 0 : hs_core_finish(w);
	int64_t t = hs_now();
	r = hs_core_block(w);
	hs_count_event_block(hs_now() - t);
	return r;
}

/* begin returns 0 when it ran the policy (*rc its result; the work is
 * complete), 1 when the wait is left to CUDA. */
static int begin(struct hs_cuda_wait *c, int *rc)
{
	c->f = NULL;
	c->start = 0;
	if (hs_in_forked_child() || hs_lib_ready() != 0)
		return 1;
	int arm = epoch_arm(&c->start);
	if (c->w.kind == HS_WAIT_EVENT)
		epoch.event_waits++;
	if (arm == HS_ARM_POLICY && epoch.cuda_blocking && c->w.kind == HS_WAIT_EVENT) {
		*rc = block_event(&c->w);
		return 0;
	}
	/* Left to CUDA: no query first. CUDA's wait on finished work is as
	 * quick as the query, and on unfinished work the query is one driver
	 * call more. Only the default mode leaves waits to CUDA, and it has
	 * read the clock. */
	if (to_cuda(arm, c->w.kernel, &c->f)) {
		if (c->w.kernel && c->w.launched == 0)
			c->w.launched = c->start;
		return 1;
	}
	*rc = through_policy(&c->w, c->start);
	return 0;
}

void hs_wait_begin(struct hs_cuda_wait *c, int kind, void *handle, int flags)
{
	identify(&c->w, kind, handle, 0, flags);
	c->once = (flags & HS_WAIT_ONCE) != 0;
	c->f = NULL;
	c->start = 0;
	/* No driver: the runtime's own call reports it, and the library is
	 * not started for a wait it could not take. */
	if (hs_core_load() != 0)
		return;
	int rc;
	begin(c, &rc);
}

/* BLOCK_COST_NS: what blocking in a wait costs at the least, in system
 * calls and the wake-up after the work completes; the time a wait lasts
 * beyond it is the most that blocking in it could give back. A little
 * under what CUDA's blocking-sync mode cost a program whose waits found
 * the work all but done (about 13 µs a wait, the CuPy stencil of
 * experiments/apps). */
#define BLOCK_COST_NS 10000

/* hs_wait_end adds what the wait lasted beyond BLOCK_COST_NS to the
 * epoch's: where that is a small share of a thread's time, blocking in its
 * waits cannot gain much, and while its CPU is free ArmChooser runs the
 * device arm rather than the model (hybridsync/armchooser.go). */
void hs_wait_end(struct hs_cuda_wait *c)
{
	if (c->start != 0) {
		int64_t end = hs_now();
		if (end - c->start > BLOCK_COST_NS)
			epoch.blockable_ns += end - c->start - BLOCK_COST_NS;
		hs_delegated_check(c->f, &c->w, c->start, end);
	}
	if (c->once)
		hs_reg_event_done(c->w.handle, c->w.kernel, c->w.launched);
}

int hs_wait(int kind, void *handle, uint64_t kernel, int flags)
{
	struct hs_cuda_wait c;
	int r;
	identify(&c.w, kind, handle, kernel, flags);
	c.once = (flags & HS_WAIT_ONCE) != 0;
	/* A wait the library does not take is CUDA's own, whatever stopped
	 * the library (a bad configuration stops it before CUDA is looked
	 * for). */
	if (begin(&c, &r))
		r = hs_core_load() == 0 ? hs_core_finish(&c.w) : HS_CUDA_ERROR_NOT_INITIALIZED;
	hs_wait_end(&c);
	return r;
}
