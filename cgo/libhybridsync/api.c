/* The public C API (include/hybridsync.h). Waits take a fast path in the Go
 * policy (a completed event costs one query); everything that can go wrong
 * before the policy runs (no driver, bad configuration, a forked child)
 * ends in CUDA's own wait, never in a crash of the host program. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "_cgo_export.h"
#include "core.h"
#include "hybridsync.h"
#include "wait.h"

/* 0: never initialised, 1: ready, 2: shut down or failed. */
static atomic_int state;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_err[512];

static int init_locked(const struct hs_config *cfg)
{
	if (hs_core_load() != 0) {
		snprintf(last_err, sizeof last_err, "%s", hs_core_error());
		hs_log(HS_LOG_ERROR, "%s", last_err);
		atomic_store(&state, 2);
		return HS_ERR_NO_CUDA;
	}
	char err[400] = "";
	const char *empty_to_null[3] = {cfg ? cfg->mode : NULL, cfg ? cfg->stats_path : NULL, cfg ? cfg->log_level : NULL};
	for (int i = 0; i < 3; i++)
		if (empty_to_null[i] && !*empty_to_null[i])
			empty_to_null[i] = NULL;
	int rc = hsgo_init((char *)empty_to_null[0], cfg ? cfg->max_spin_us : 0, (char *)empty_to_null[1],
			   (char *)empty_to_null[2], err, sizeof err);
	if (rc != 0) {
		snprintf(last_err, sizeof last_err, "configuration: %s", err);
		hs_log_user(last_err);
		atomic_store(&state, 2);
		return HS_ERR_CONFIG;
	}
	last_err[0] = 0;
	atomic_store(&state, 1);
	return HS_OK;
}

int hs_init(const struct hs_config *cfg)
{
	if (hs_in_forked_child())
		return HS_ERR_STATE;
	if (cfg && cfg->struct_size < sizeof(struct hs_config)) {
		snprintf(last_err, sizeof last_err, "hs_config.struct_size %zu: want sizeof(struct hs_config) = %zu",
			 cfg->struct_size, sizeof(struct hs_config));
		return HS_ERR_INVAL;
	}
	pthread_mutex_lock(&init_mu);
	int rc = init_locked(cfg);
	pthread_mutex_unlock(&init_mu);
	return rc;
}

/* ensure_init initialises from the environment on first use; a failure is
 * remembered (and logged once), not retried on every wait. */
static int ensure_init(void)
{
	int s = atomic_load_explicit(&state, memory_order_acquire);
	if (s != 0)
		return s == 1 ? 0 : -1;
	pthread_mutex_lock(&init_mu);
	if (atomic_load(&state) == 0)
		init_locked(NULL);
	pthread_mutex_unlock(&init_mu);
	return atomic_load(&state) == 1 ? 0 : -1;
}

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
 * library were not there. The C side times them (to the wait's return
 * from the kernel's launch, or its event's record, or for a stream wait
 * the wait's start: see core.c): one that ends later than the policy's
 * short-wait bound ends the delegation, and that kernel's next waits go through the
 * policy again, which learns its new timing. Measured on real PyTorch and
 * launch-bound programs (docs/BENCHMARKS.md): a policy that spun for such
 * waits itself cost 12 µs of CPU per step, 15% of a launch-bound loop, and
 * under a co-runner blocking for them lost to CUDA's default.
 *
 * Calls into Go are kept off the per-wait path for a second reason: every
 * call from a C thread into Go wakes the Go runtime's monitor thread,
 * which then takes the call's P back and wakes another thread to hand it
 * to: 5-10 context switches per call, on the program's own CPU when it is
 * pinned (stepbench on the stand-in, one CPU: 5900 context switches a
 * second with a call per 16 waits). A wait with no known kernel goes to
 * CUDA too. */
struct fast {
	_Atomic uint64_t id; /* kernel id + 1, so that kernel 0 has a slot */
	atomic_ulong n;      /* already complete */
	atomic_ulong deleg;  /* left to CUDA's own wait */
	atomic_uint on;      /* delegate this kernel's waits */
};
#define FAST_SLOTS 1024
#define FAST_PROBE 16
static struct fast fast[FAST_SLOTS];
static atomic_ulong fast_lost;
static atomic_int delegating;     /* the default mode is configured */
static _Atomic int64_t short_ns; /* a delegated wait ending later than this after its launch is long */

/* fast_slot finds (or, with create, claims) the kernel's slot; NULL when
 * its probe window is full, which only loses counts. */
static struct fast *fast_slot(uint64_t kernel, int create)
{
	uint64_t key = kernel + 1;
	for (int i = 0; i < FAST_PROBE; i++) {
		struct fast *f = &fast[((key * 0x9e3779b97f4a7c15ull >> 54) + i) & (FAST_SLOTS - 1)];
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

/* fast_count counts a wait of kernel that was already complete (deleg 0)
 * or left to CUDA's own wait (deleg 1). */
static void fast_count(uint64_t kernel, int deleg)
{
	struct fast *f = fast_slot(kernel, 1);
	if (f)
		atomic_fetch_add_explicit(deleg ? &f->deleg : &f->n, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&fast_lost, 1, memory_order_relaxed);
}

/* delegated returns the kernel's slot if its waits are left to CUDA's own
 * wait, else NULL (no known kernel: also CUDA's, without a slot). */
static struct fast *delegated(uint64_t kernel)
{
	struct fast *f = kernel ? fast_slot(kernel, 0) : NULL;
	return f && atomic_load_explicit(&f->on, memory_order_relaxed) ? f : NULL;
}

/* doneAtStart: a CUDA wait that returned within this of its start found
 * the work (all but) complete. Delegated waits skip the query that used
 * to tell (it is a driver call; the runtime's own wait follows anyway),
 * so such a wait says nothing about the kernel's timing: an event recorded
 * long before its wait would otherwise end the delegation. */
#define DONE_AT_START_NS 2000

/* check_delegated ends the delegation of w's kernel when its wait, which
 * started at start and returned at end, completed later after the launch
 * than a short wait does. */
static void check_delegated(struct fast *f, const struct hs_wait *w, int64_t start, int64_t end)
{
	if (f == NULL || w->launched <= 0)
		return;
	if (end - start > DONE_AT_START_NS && end - w->launched > atomic_load_explicit(&short_ns, memory_order_relaxed))
		atomic_store_explicit(&f->on, 0, memory_order_relaxed);
}

/* The thread's epochs, in the default mode: which arm its waits take (see
 * hybridsync.Outcomes), how many waits it made since the running epoch
 * began, and when that ends. The epochs of a plan run back to back and
 * are reported to Go together at its end (hybridsync.Epoch says why), so
 * the cost per wait is one clock read. The arms: the model (short waits
 * to CUDA, the rest through the policy); CUDA's own wait with the
 * program's schedule (CUDA's default mode); and the policy, which on a
 * contended CPU is CUDA's blocking-sync mode: the context is switched to
 * it and every wait left to CUDA (where the driver cannot switch, the Go
 * policy blocks on a shadow event instead). */
enum { ARM_MODEL = 0, ARM_DEVICE = 1, ARM_POLICY = 2 };
struct epoch {
	int64_t due;        /* when the running epoch's time is up */
	int64_t start, cpu; /* its start, and the thread's CPU time then */
	unsigned long waits;
	int64_t blockable_ns; /* its waits' wall time beyond BLOCK_COST_NS each */
	int arm;
	int cuda_blocking; /* the context is in blocking-sync mode for this arm */
	struct hs_plan plan;
	int step; /* the running epoch's index in plan */
	struct hs_epoch_done done[HS_PLAN_MAX];
	/* While the CPU is free (Epoch.Quiet in hybridsync/outcomes.go):
	 * until when reports may be skipped, the run delay and
	 * schedulings-in at the last check, and when that was. */
	int64_t quiet_until, delay, runs, delay_at;
	/* While the thread's wait hooks are off (hs_epoch_pause): since
	 * when, and its CPU time then; 0 when not paused. */
	int64_t paused_at, paused_cpu;
};
static __thread struct epoch epoch __attribute__((tls_model("initial-exec")));
static atomic_ulong quiet_checks; /* reports skipped by still_free */
/* Reports made into Go, and the wall time the calling thread spent in
 * them: a crossing wakes the Go runtime's threads, which on a contended
 * CPU can wait behind the co-runner. */
static atomic_ulong reports;
static _Atomic int64_t report_ns, report_max_ns;

/* Only the model arm, and the policy where CUDA cannot block for it, use
 * what a launch or record tells (the kernel, its time); in the others every
 * wait is CUDA's own. A thread in those skips observing its launches: on
 * the GPU that cost a launch-bound program 0.3-1.4% of its time
 * (experiments/apps/diag/arms.sh), which under contention made it
 * slower than CUDA's default, whose arm it was running. A thread that
 * launches and never waits has no epoch and observes all along. */
__attribute__((visibility("hidden"))) __thread int hs_unobserved __attribute__((tls_model("initial-exec")));

static void set_arm(int arm)
{
	int blocking = arm == ARM_POLICY && hs_core_sched_blocking(1) == 0;
	if (!blocking && epoch.cuda_blocking)
		hs_core_sched_blocking(0);
	epoch.arm = arm;
	epoch.cuda_blocking = blocking;
	hs_unobserved = arm == ARM_DEVICE || blocking;
}

/* run_delay reads the calling thread's run delay, the time it was runnable
 * but waiting for a CPU (ns), and how often it was scheduled in
 * (schedstat's second and third fields); 0 if unreadable. Three system
 * calls, a few µs: once per check. */
static int run_delay(int64_t *delay, int64_t *runs)
{
	char buf[96];
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *s = strchr(buf, ' '), *e1, *e2;
	if (s == NULL)
		return 0;
	long long d = strtoll(s + 1, &e1, 10), r = strtoll(e1, &e2, 10);
	if (e1 == s + 1 || e2 == e1 || d < 0 || r < 0)
		return 0;
	*delay = d;
	*runs = r;
	return 1;
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
	if (now >= epoch.quiet_until || !run_delay(&d, &r))
		return 0;
	int64_t grew = d - epoch.delay, runs = r - epoch.runs;
	int flat = grew * 100 < now - epoch.delay_at || (runs > 0 && grew < epoch.plan.quiet_per_run * runs);
	epoch.delay = d;
	epoch.runs = r;
	epoch.delay_at = now;
	if (flat)
		atomic_fetch_add_explicit(&quiet_checks, 1, memory_order_relaxed);
	return flat;
}

__attribute__((visibility("hidden"))) unsigned long hs_quiet_checks(void) { return atomic_load(&quiet_checks); }

__attribute__((visibility("hidden"))) unsigned long hs_reports(int64_t *ns, int64_t *max_ns)
{
	*ns = atomic_load(&report_ns);
	*max_ns = atomic_load(&report_max_ns);
	return atomic_load(&reports);
}

/* count_report adds one report that took spent ns. */
static void count_report(int64_t spent)
{
	atomic_fetch_add_explicit(&reports, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&report_ns, spent, memory_order_relaxed);
	int64_t m = atomic_load_explicit(&report_max_ns, memory_order_relaxed);
	while (spent > m && !atomic_compare_exchange_weak(&report_max_ns, &m, spent))
		;
}

/* thread_cpu is the calling thread's CPU time (ns): a system call, once
 * per epoch. */
static int64_t thread_cpu(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* report hands the plan's epochs to Go, at now, and takes the next plan. */
static void report(int64_t now)
{
	hsgo_epoch(epoch.step, epoch.done, now, &epoch.plan);
	count_report(hs_now() - now);
	epoch.step = 0;
	if (epoch.plan.n < 1 || epoch.plan.n > HS_PLAN_MAX || epoch.plan.len <= 0)
		epoch.plan = (struct hs_plan){.n = 1, .len = 1000000000};
	epoch.quiet_until = 0;
	if (epoch.plan.quiet > 0 && run_delay(&epoch.delay, &epoch.runs)) {
		epoch.quiet_until = now + epoch.plan.quiet;
		epoch.delay_at = now;
	}
}

/* next_epoch ends the running epoch at now (if one ran), and starts the
 * plan's next, reporting first when the plan is done. */
static void next_epoch(int64_t now)
{
	int64_t cpu = thread_cpu();
	if (epoch.plan.n > 0) /* report() keeps n within HS_PLAN_MAX */
		epoch.done[epoch.step++] = (struct hs_epoch_done){epoch.waits, now - epoch.start, cpu - epoch.cpu, epoch.blockable_ns};
	if (epoch.step >= epoch.plan.n)
		report(now);
	int arm = epoch.plan.arms[epoch.step];
	if (arm != epoch.arm || (arm == ARM_POLICY && !epoch.cuda_blocking))
		set_arm(arm);
	epoch.start = now;
	epoch.cpu = cpu;
	epoch.waits = 0;
	epoch.blockable_ns = 0;
	epoch.due = now + epoch.plan.len;
}

/* epoch_arm returns the arm of the thread's wait starting now, and sets
 * *now to the time it read (0 outside the default mode, which reads none). */
static int epoch_arm(int64_t *now_out)
{
	*now_out = 0;
	if (!atomic_load_explicit(&delegating, memory_order_relaxed))
		return ARM_POLICY;
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

/* hs_epoch_pause pauses (pause 1) or resumes (0) the calling thread's
 * epoch, for hs_interpose switching its wait hooks off and on: the time and
 * CPU spent paused are left out of the running epoch, so what the epoch
 * reports measures only its own arm, and a context the arm switched to
 * blocking-sync goes back to the program's schedule while paused (the
 * waits are then CUDA's alone, in the program's own mode). Used to compare
 * the library with CUDA's two modes inside one process
 * (experiments/apps/inproc.py), where separate processes vary more than
 * the difference looked for. */
__attribute__((visibility("hidden"))) void hs_epoch_pause(int pause)
{
	if (!atomic_load_explicit(&delegating, memory_order_relaxed) || epoch.plan.n == 0)
		return;
	if (pause) {
		if (epoch.paused_at)
			return;
		epoch.paused_at = hs_now();
		epoch.paused_cpu = thread_cpu();
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
	epoch.cpu += thread_cpu() - epoch.paused_cpu;
	epoch.paused_at = 0;
	if (epoch.arm == ARM_POLICY)
		set_arm(ARM_POLICY);
}

/* to_cuda reports whether this unfinished wait goes to CUDA's own wait,
 * and counts it if so; *f is set to the kernel's slot when the model arm
 * delegated it (to be checked when it returns). */
static int to_cuda(int arm, uint64_t kernel, struct fast **f)
{
	*f = NULL;
	int cuda = arm == ARM_DEVICE || (arm == ARM_POLICY && epoch.cuda_blocking);
	if (!cuda && arm == ARM_MODEL)
		cuda = kernel == 0 || (*f = delegated(kernel)) != NULL;
	if (cuda)
		fast_count(kernel, 1);
	return cuda;
}

__attribute__((visibility("hidden"))) void hs_delegate_mode(int on, int64_t short_wait_ns)
{
	atomic_store(&short_ns, short_wait_ns);
	atomic_store(&delegating, on);
}

__attribute__((visibility("hidden"))) void hs_delegate_set(uint64_t kernel, int on)
{
	struct fast *f = fast_slot(kernel, 1);
	if (f && (int)atomic_load_explicit(&f->on, memory_order_relaxed) != on)
		atomic_store_explicit(&f->on, on, memory_order_relaxed);
}

/* hs_fast_get reads slot i: 1 and (kernel, counts) when used. */
__attribute__((visibility("hidden"))) int hs_fast_get(int i, uint64_t *kernel, unsigned long *n, unsigned long *deleg)
{
	if (i < 0 || i >= FAST_SLOTS)
		return 0;
	uint64_t id = atomic_load(&fast[i].id);
	if (id == 0)
		return 0;
	*kernel = id - 1;
	*n = atomic_load(&fast[i].n);
	*deleg = atomic_load(&fast[i].deleg);
	return 1;
}

__attribute__((visibility("hidden"))) void hs_fast_reset(void)
{
	for (int i = 0; i < FAST_SLOTS; i++) {
		atomic_store(&fast[i].n, 0);
		atomic_store(&fast[i].deleg, 0);
		atomic_store(&fast[i].on, 0);
	}
}

static int hs_wait_policy(struct hs_wait *w, int64_t start);

__attribute__((visibility("hidden"))) int hs_wait_begin(struct hs_wait *w, struct hs_cuda_wait *c)
{
	c->f = NULL;
	c->start = 0;
	if (hs_in_forked_child() || ensure_init() != 0)
		return 1;
	int arm = epoch_arm(&c->start);
	/* Left to CUDA: no query first. CUDA's wait on finished work is as
	 * quick as the query, and on unfinished work the query is one driver
	 * call more. Only the default mode leaves waits to CUDA, and it has
	 * read the clock. */
	if (to_cuda(arm, w->kernel, &c->f)) {
		if (w->kernel && w->launched == 0)
			w->launched = c->start;
		return 1;
	}
	c->rc = hs_wait_policy(w, c->start);
	return 0;
}

/* BLOCK_COST_NS: what blocking in a wait costs at the least, in system
 * calls and the wake-up after the work completes; the time a wait lasts
 * beyond it is the most that blocking in it could give back. Measured on
 * the H100 machine: CUDA's blocking-sync mode cost the CuPy stencil of
 * experiments/apps 13 µs per wait, its waits finding the work all but
 * done (14-19% of a 75 µs step, alone). */
#define BLOCK_COST_NS 10000

/* hs_wait_end adds what the wait lasted beyond BLOCK_COST_NS to the
 * epoch's: where that is a small share of a thread's time, blocking in its
 * waits cannot gain much, and Outcomes does not explore it
 * (hybridsync/outcomes.go). */
__attribute__((visibility("hidden"))) void hs_wait_end(struct hs_wait *w, const struct hs_cuda_wait *c)
{
	if (c->start == 0)
		return;
	int64_t end = hs_now();
	if (end - c->start > BLOCK_COST_NS)
		epoch.blockable_ns += end - c->start - BLOCK_COST_NS;
	check_delegated(c->f, w, c->start, end);
}

/* hs_wait_policy runs the policy on w, which started at start (0: not
 * read): work already complete returns at once, counted here. */
static int hs_wait_policy(struct hs_wait *w, int64_t start)
{
	if (w->kind != HS_WAIT_CTX && hs_core_query(w) == 0) {
		fast_count(w->kernel, 0);
		return 0;
	}
	/* An observed launch has no time (core.c): the wait counts from its
	 * start. */
	if (w->kernel && w->launched == 0)
		w->launched = start ? start : hs_now();
	int r = hsgo_sync(w);
	/* Not configured (shut down meanwhile): CUDA's own wait. An error,
	 * or a context-wide wait (whose query covers only the legacy
	 * stream): the real synchronize on the finished work gives the
	 * exact result. */
	if (r != 0 || w->kind == HS_WAIT_CTX)
		r = hs_core_finish(w);
	return r;
}

__attribute__((visibility("hidden"))) int hs_wait(struct hs_wait *w)
{
	struct hs_cuda_wait c;
	int r;
	if (!hs_wait_begin(w, &c))
		r = c.rc;
	else if (!hs_core_loaded())
		return HS_CUDA_ERROR_NOT_INITIALIZED;
	else
		r = hs_core_finish(w);
	hs_wait_end(w, &c);
	return r;
}

hs_kernel_t hs_kernel(const char *name)
{
	if (name == NULL || *name == 0 || hs_in_forked_child())
		return 0;
	return hsgo_kernel((char *)name);
}

void hs_launch_mark(hs_stream_t stream, hs_kernel_t kernel) { hs_reg_launch(stream, kernel, hs_now()); }

int hs_sync(hs_event_t event, hs_kernel_t kernel)
{
	struct hs_wait w = {.handle = event, .kind = HS_WAIT_EVENT, .kernel = kernel};
	uint64_t k;
	int64_t t;
	if (kernel)
		w.launched = hs_reg_kernel_launched(kernel);
	else if (hs_reg_event(event, &k, &t))
		w.kernel = k, w.launched = t;
	return hs_wait(&w);
}

int hs_stream_sync(hs_stream_t stream, hs_kernel_t kernel)
{
	struct hs_wait w = {.handle = stream, .kind = HS_WAIT_STREAM, .kernel = kernel};
	uint64_t k;
	int64_t t;
	if (hs_reg_stream(stream, &k, &t) && (kernel == 0 || k == kernel))
		w.kernel = k, w.launched = t;
	else if (kernel)
		w.launched = hs_reg_kernel_launched(kernel);
	return hs_wait(&w);
}

long hs_stats_json(char *buf, size_t len)
{
	if (buf == NULL && len > 0)
		return HS_ERR_INVAL;
	if (hs_in_forked_child() || atomic_load(&state) != 1)
		return HS_ERR_STATE;
	long n = hsgo_stats_json(buf, len);
	return n == -4 ? HS_ERR_STATE : n;
}

int hs_shutdown(void)
{
	if (hs_in_forked_child())
		return HS_ERR_STATE;
	pthread_mutex_lock(&init_mu);
	int s = atomic_load(&state);
	int rc = HS_ERR_STATE;
	if (s == 1) {
		hsgo_shutdown();
		atomic_store(&state, 2);
		rc = HS_OK;
	}
	pthread_mutex_unlock(&init_mu);
	return rc;
}

const char *hs_last_error(void) { return last_err; }

const char *hs_strerror(int code)
{
	switch (code) {
	case HS_OK:
		return "success";
	case HS_ERR_INVAL:
		return "invalid argument";
	case HS_ERR_NO_CUDA:
		return "CUDA driver not available";
	case HS_ERR_CONFIG:
		return "bad configuration";
	case HS_ERR_STATE:
		return "library not initialised, shut down, or in a forked child";
	}
	return "unknown hybridsync status";
}

/* write_unengaged writes the stats file of a library that tried to start
 * and could not (no driver, a bad HYBRIDSYNC_* value): "engaged": false and
 * why, so that a user who asked for stats is told rather than left to
 * wonder why the numbers are missing. Plain C: the Go side was never
 * configured. Written whole or not at all (temporary file, rename). */
static void write_unengaged(void)
{
	const char *path = getenv("HYBRIDSYNC_STATS");
	if (path == NULL || *path == 0)
		return;
	char file[4096], tmp[4200], reason[1100];
	size_t n = 0;
	for (const char *p = path; *p && n < sizeof file - 16; p++) {
		if (p[0] == '%' && p[1] == 'p') {
			n += snprintf(file + n, sizeof file - n, "%d", (int)getpid());
			p++;
		} else {
			file[n++] = *p;
		}
	}
	file[n] = 0;
	size_t k = 0;
	for (const char *p = last_err; *p && k < sizeof reason - 8; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"' || c == '\\')
			reason[k++] = '\\', reason[k++] = (char)c;
		else if (c >= 0x20)
			reason[k++] = (char)c;
	}
	reason[k] = 0;
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", file, (int)getpid());
	FILE *f = fopen(tmp, "w");
	if (f == NULL) {
		hs_log(HS_LOG_ERROR, "stats: cannot write %s", tmp);
		return;
	}
	fprintf(f, "{\"version\":1,\"pid\":%d,\"engaged\":false,\"reason\":\"%s\"}\n", (int)getpid(), reason);
	if (fclose(f) != 0 || rename(tmp, file) != 0) {
		hs_log(HS_LOG_ERROR, "stats: cannot write %s", file);
		unlink(tmp);
	}
}

/* The stats file at exit: only in the process that initialised (a forked
 * child that exits must not overwrite its parent's file, nor call into a
 * Go runtime whose threads it does not have). A process whose first wait
 * found the library unable to start says so; one that never waited writes
 * nothing (it may never have used CUDA at all). */
__attribute__((destructor)) static void write_stats_at_exit(void)
{
	if (hs_in_forked_child())
		return;
	switch (atomic_load(&state)) {
	case 1:
		hsgo_write_stats();
		break;
	case 2:
		if (last_err[0])
			write_unengaged();
		break;
	}
}
