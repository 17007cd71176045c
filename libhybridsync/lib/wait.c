/* The wait runner: one wait, from an entry point (api.c, interpose.c) to
 * its end, as Go decided. It names the wait's kernel and launch time from
 * the launch registry, takes the route its thread's plan gives that kind
 * of wait (hybridsync.Plan: Go's verdict, kept here per thread and run
 * epoch by epoch with one clock read per wait), and executes it: CUDA's
 * own wait, a shadow event's blocking wait, or one call into the Go policy
 * (hsgo_sync), whose verdict on the kernel's waits it keeps in the
 * delegation table. Nothing here chooses: every number and route comes
 * from Go (the plan, hybridsync.Delegation), and what the runner measures
 * goes back with the next report. Calls, in that order: core.h (the
 * registry), life.h (initialise on first use), schedstat.h, stats.h, Go's
 * hsgo_epoch at a plan's end (and omplive.h around it: libomp's
 * blocktime, as Go's answer says), deleg.h, core.h (query, CUDA's wait) and Go
 * (hsgo_sync); nothing calls back up into it but Go's Sync, through
 * core.h's waits. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "_cgo_export.h"
#include "core.h"
#include "deleg.h"
#include "life.h"
#include "omplive.h"
#include "schedstat.h"
#include "stats.h"
#include "wait.h"

/* The thread's plan, in the default mode, and where it is in it: the
 * running step, how many waits it made since it began, and when it ends.
 * The steps of a plan run back to back and are reported to Go together at
 * its end (hybridsync.Plan says why), so the cost per wait is one clock
 * read. */
struct epoch {
	int64_t due;        /* when the running step's time is up */
	int64_t start, cpu; /* its start, and the thread's CPU time then */
	unsigned long waits, event_waits;
	int64_t blockable_ns; /* its waits' wall time beyond plan.block_cost each */
	struct hs_step cur;   /* the running step's routes */
	int cuda_blocking;    /* the context is in blocking-sync mode for it */
	struct hs_plan plan;
	int step; /* the running step's index in plan */
	struct hs_epoch_done done[HS_PLAN_MAX];
	/* The run delay and schedulings-in at the last reading, and when
	 * that was; while the plan allows (Plan.Quiet), until when reports
	 * may be skipped. */
	int64_t delay, runs, delay_at, quiet_until;
	int delay_ok;
	/* While the thread's wait hooks are off (hs_epoch_pause): since
	 * when, and its CPU time then; 0 when not paused. */
	int64_t paused_at, paused_cpu;
};
static __thread struct epoch epoch __attribute__((tls_model("initial-exec")));

/* Only the model and policy routes use what a launch or record tells (the
 * kernel, its time); in the others every wait is CUDA's own or a shadow's.
 * A thread whose step has neither skips observing its launches: on CUDA's
 * routes the library adds no work to a launch (what observing costs:
 * docs/BENCHMARKS.md, "What the library's parts cost"). A thread
 * that launches and never waits has no plan and observes all along. */
__thread int hs_unobserved __attribute__((tls_model("initial-exec")));

/* route_of is the running step's route for a wait of kind. */
static int route_of(int kind)
{
	const struct hs_step *s = &epoch.cur;
	int sw = !s->blocking || epoch.cuda_blocking;
	if (kind == HS_WAIT_EVENT)
		return sw ? s->event : s->event_unswitched;
	return sw ? s->other : s->other_unswitched;
}

static int needs_kernel(int route) { return route == HS_ROUTE_MODEL || route == HS_ROUTE_POLICY; }

/* set_step makes s the running step: the context's schedule as it asks. */
static void set_step(const struct hs_step *s)
{
	int blocking = s->blocking && hs_core_sched_blocking(1) == 0;
	if (!blocking && epoch.cuda_blocking)
		hs_core_sched_blocking(0);
	epoch.cur = *s;
	epoch.cuda_blocking = blocking;
	hs_unobserved = !needs_kernel(route_of(HS_WAIT_EVENT)) && !needs_kernel(route_of(HS_WAIT_STREAM));
}

/* read_delay reads the thread's run delay at now into the epoch. */
static int read_delay(int64_t now)
{
	epoch.delay_ok = hs_run_delay(&epoch.delay, &epoch.runs);
	epoch.delay_at = now;
	return epoch.delay_ok;
}

/* still_free tells whether the thread may skip this report: the plan
 * allows it until quiet_until, and since the last reading its run delay
 * grew by under the plan's share of the time, or by under its bound per
 * scheduling-in. A report crosses into Go, whose runtime threads then wake
 * on the program's CPU (hundreds of context switches a second). */
static int still_free(int64_t now)
{
	if (now >= epoch.quiet_until || !epoch.delay_ok)
		return 0;
	int64_t d0 = epoch.delay, r0 = epoch.runs, at = epoch.delay_at;
	if (!read_delay(now))
		return 0;
	int64_t grew = epoch.delay - d0, runs = epoch.runs - r0;
	int flat = (double)grew < epoch.plan.quiet_frac * (double)(now - at) ||
		   (epoch.plan.quiet_per_run > 0 && runs > 0 && grew < epoch.plan.quiet_per_run * runs);
	if (flat)
		hs_count_quiet();
	return flat;
}

/* log_report says at HYBRIDSYNC_LOG=debug what the thread's epochs
 * measured (routes of event and other waits, waits, wall and CPU time)
 * and the plan Go gave next. */
static void log_report(const struct hs_plan *ran, int n)
{
	static const char *const names[] = {"device", "model", "policy", "shadow"};
#define ROUTE_NAME(r) ((r) >= 0 && (r) < 4 ? names[(r)] : "?")
	char buf[480];
	int k = n > 0 ? 0 : snprintf(buf, sizeof buf, "none");
	for (int i = 0; i < n && i < HS_PLAN_MAX && k < (int)sizeof buf; i++) {
		const struct hs_epoch_done *d = &epoch.done[i];
		k += snprintf(buf + k, sizeof buf - k, "%s%s/%s%s %lu waits %.1f ms cpu %.1f ms", i ? ", " : "",
			      ROUTE_NAME(ran->steps[i].event), ROUTE_NAME(ran->steps[i].other),
			      ran->steps[i].blocking ? " blocking" : "", d->waits, d->wall / 1e6, d->cpu / 1e6);
	}
	for (int i = 0; i < epoch.plan.n && i < HS_PLAN_MAX && k < (int)sizeof buf; i++)
		k += snprintf(buf + k, sizeof buf - k, "%s%s/%s%s", i ? " " : "; next ",
			      ROUTE_NAME(epoch.plan.steps[i].event), ROUTE_NAME(epoch.plan.steps[i].other),
			      epoch.plan.steps[i].blocking ? " blocking" : "");
#undef ROUTE_NAME
	hs_log(HS_LOG_DEBUG, "tid %d epochs: %s, %.1f ms each", (int)gettid(), buf, epoch.plan.len / 1e6);
}

/* report hands the plan's epochs and the thread's run delay (read at now,
 * the one reading of it this decision uses) to Go, and takes the next
 * plan; in the same call, where the program runs libomp, Go says what
 * the thread's blocktime should be (omplive.h), which the thread sets. */
static void report(int64_t now)
{
	struct hs_plan ran = epoch.plan;
	if (epoch.delay_at != now)
		read_delay(now);
	int bt = hs_omp_blocktime();
	hsgo_epoch(epoch.step, epoch.done, now, epoch.delay, epoch.runs, epoch.delay_ok, bt, &epoch.plan);
	if (bt >= 0)
		hs_omp_set_blocktime(epoch.plan.blocktime);
	if (hs_log_enabled(HS_LOG_DEBUG))
		log_report(&ran, epoch.step);
	hs_count_report(hs_now() - now);
	epoch.step = 0;
	/* Go's plans are valid; this only keeps the runner within its
	 * arrays: every wait CUDA's own for a second. */
	if (epoch.plan.n < 1 || epoch.plan.n > HS_PLAN_MAX || epoch.plan.len <= 0)
		epoch.plan = (struct hs_plan){.n = 1, .len = 1000000000, .blocktime = -1};
	epoch.quiet_until = epoch.plan.quiet > 0 ? now + epoch.plan.quiet : 0;
}

/* next_epoch ends the running step at now (if one ran), and starts the
 * plan's next, reporting first when the plan is done. */
static void next_epoch(int64_t now)
{
	int64_t cpu = hs_thread_cpu();
	if (epoch.plan.n > 0) /* report() keeps n within HS_PLAN_MAX */
		epoch.done[epoch.step++] = (struct hs_epoch_done){epoch.waits, epoch.event_waits, now - epoch.start,
								  cpu - epoch.cpu, epoch.blockable_ns};
	if (epoch.step >= epoch.plan.n)
		report(now);
	const struct hs_step *s = &epoch.plan.steps[epoch.step];
	if (memcmp(s, &epoch.cur, sizeof *s) != 0 || (s->blocking && !epoch.cuda_blocking) || epoch.start == 0)
		set_step(s);
	epoch.start = now;
	epoch.cpu = cpu;
	epoch.waits = 0;
	epoch.event_waits = 0;
	epoch.blockable_ns = 0;
	epoch.due = now + epoch.plan.len;
}

/* epoch_route returns the route of the thread's wait of kind starting now,
 * and sets *now to the time it read (0 outside the default mode, whose
 * waits all take the policy and which reads none). */
static int epoch_route(int kind, int64_t *now_out)
{
	*now_out = 0;
	if (!atomic_load_explicit(&hs_delegating, memory_order_relaxed))
		return HS_ROUTE_POLICY;
	epoch.waits++;
	int64_t now = hs_now();
	*now_out = now;
	if (now < epoch.due)
		return route_of(kind);
	if (still_free(now)) {
		epoch.due = now + epoch.plan.len;
		return route_of(kind);
	}
	/* Too few waits for a rate (Plan.MinWaits): the step goes on. */
	if (epoch.waits < epoch.plan.min_waits && now - epoch.start < epoch.plan.max_len) {
		epoch.due = now + epoch.plan.extend;
		return route_of(kind);
	}
	next_epoch(now);
	return route_of(kind);
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
	if (epoch.cur.blocking)
		set_step(&epoch.cur);
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

/* to_device counts a wait that goes to CUDA's own wait, and names its
 * launch for the delegation check (a launch observed with no time counts
 * from the wait's start, which only the default mode reads). */
static void to_device(struct hs_cuda_wait *c)
{
	hs_fast_count(c->w.kernel, 1);
	hs_count_wait(c->w.kind, HS_PATH_DEVICE);
	if (c->w.kernel && c->w.launched == 0)
		c->w.launched = c->start;
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
			hs_count_wait(w->kind, HS_PATH_READY);
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
	hs_count_wait(w->kind, HS_PATH_POLICY);
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

/* block_event runs the shadow route. CUDA's blocking-sync schedule makes
 * its stream and context waits block, but an event wait spins unless its
 * event was created blocking (core.c), and programs that wait on their own
 * events (GROMACS does, after every step's forces) would spin through
 * every wait of a plan step meant to give the CPU back. So an unfinished
 * event blocks on a shadow event that completes with it. */
static int block_event(struct hs_wait *w)
{
	int r = hs_core_query(w);
	/* Counted as the other routes' waits are (left to CUDA, or found
	 * done), so every wait stays in the stats once. */
	hs_fast_count(w->kernel, r == HS_CUDA_ERROR_NOT_READY);
	hs_count_wait(w->kind, r == HS_CUDA_ERROR_NOT_READY ? HS_PATH_SHADOW : HS_PATH_READY);
	if (r != HS_CUDA_ERROR_NOT_READY)
		return r == 0 ? 0 : hs_core_finish(w);
	int64_t t = hs_now();
	r = hs_core_block(w);
	hs_count_event_block(hs_now() - t);
	return r;
}

/* begin executes the route of c's wait: returns 0 when the library waited
 * (*rc its result; the work is complete), 1 when the wait is left to
 * CUDA. */
static int begin(struct hs_cuda_wait *c, int *rc)
{
	c->f = NULL;
	c->start = 0;
	if (hs_in_forked_child() || hs_lib_ready() != 0)
		return 1;
	int route = epoch_route(c->w.kind, &c->start);
	if (c->w.kind == HS_WAIT_EVENT)
		epoch.event_waits++;
	switch (route) {
	case HS_ROUTE_SHADOW:
		if (c->w.kind == HS_WAIT_EVENT) {
			*rc = block_event(&c->w);
			return 0;
		}
		break;
	case HS_ROUTE_DEVICE:
		to_device(c);
		return 1;
	case HS_ROUTE_MODEL:
		if (c->w.kernel == 0 || (c->f = hs_delegated(c->w.kernel)) != NULL) {
			to_device(c);
			return 1;
		}
		break;
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

/* hs_wait_end adds what the wait lasted beyond the plan's block_cost to
 * the step's (Plan.BlockCost: where that is a small share of a thread's
 * time, blocking in its waits cannot gain much), and ends the kernel's
 * delegation if the wait outlasted it (deleg.h). */
void hs_wait_end(struct hs_cuda_wait *c)
{
	if (c->start != 0) {
		int64_t end = hs_now();
		if (end - c->start > epoch.plan.block_cost)
			epoch.blockable_ns += end - c->start - epoch.plan.block_cost;
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
