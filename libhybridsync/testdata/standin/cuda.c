/* A stand-in for the CUDA driver (libcuda.so.1) for tests on machines with
 * no GPU. A kernel's "duration" in ns is its first parameter (negative: a
 * kernel that faults after |duration|); it completes that long after the
 * stream's previous work, on the clock, whatever the host threads do.
 * Plain events busy-wait in cuEventSynchronize, as CUDA's do; events made
 * with CU_EVENT_BLOCKING_SYNC sleep. Counters let tests see which wait ran.
 * Only what libhybridsync and the test programs use is here. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef uint64_t cuuint64_t;

#define OK 0
#define E_INVALID_VALUE 1
#define E_INVALID_HANDLE 400
#define E_NOT_FOUND 500
#define E_NOT_READY 600
#define E_LAUNCH_FAILED 719

#define STREAM_MAGIC 0x57524541u
#define EVENT_MAGIC 0x45564e54u

struct stream {
	unsigned magic;
	int64_t tail;
	int err;
};
struct event {
	unsigned magic;
	unsigned flags;
	int recorded;
	int64_t done;
	int err;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct stream legacy = {STREAM_MAGIC, 0, 0}, per_thread = {STREAM_MAGIC, 0, 0};
static int64_t all_tail;
static int ctx_token;

/* What the tests read. */
atomic_long standin_blocking_waits; /* blocking-sync event waits that slept */
atomic_long standin_spin_waits;     /* synchronize calls that busy-waited for unfinished work */
atomic_long standin_launches;
atomic_long standin_queries; /* event and stream queries */

static int64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct stream *get_stream(void *h, int ptsz)
{
	uintptr_t v = (uintptr_t)h;
	if (v == 0)
		return ptsz ? &per_thread : &legacy;
	if (v == 1)
		return &legacy;
	if (v == 2)
		return &per_thread;
	struct stream *s = h;
	return s->magic == STREAM_MAGIC ? s : NULL;
}

static struct event *get_event(void *h)
{
	struct event *e = h;
	return e && e->magic == EVENT_MAGIC ? e : NULL;
}

static void sleep_until(int64_t t)
{
	struct timespec ts = {t / 1000000000, t % 1000000000};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void spin_until(int64_t t)
{
	if (now() < t)
		atomic_fetch_add(&standin_spin_waits, 1);
	while (now() < t)
		;
}

CUresult cuInit(unsigned flags) { return flags ? E_INVALID_VALUE : OK; }
CUresult cuDriverGetVersion(int *v)
{
	if (!v)
		return E_INVALID_VALUE;
	*v = 13000;
	return OK;
}
/* The context's flags: with CU_CTX_SCHED_BLOCKING_SYNC (4), stream and
 * context waits sleep, as in CUDA's blocking-sync mode; a plain event's
 * wait spins whatever the schedule, as CUDA's does. */
static atomic_uint ctx_flags;
CUresult cuCtxGetFlags(unsigned *f)
{
	if (!f)
		return E_INVALID_VALUE;
	*f = atomic_load(&ctx_flags);
	return OK;
}
CUresult cuCtxSetFlags(unsigned f)
{
	atomic_store(&ctx_flags, f);
	return OK;
}
static int ctx_blocking(void) { return (atomic_load(&ctx_flags) & 7) == 4; }

/* wait_until: how CUDA's own wait waits, for a stream or the context. */
static void wait_until(int64_t t)
{
	if (!ctx_blocking()) {
		spin_until(t);
		return;
	}
	if (now() < t)
		atomic_fetch_add(&standin_blocking_waits, 1);
	sleep_until(t);
}

CUresult cuCtxGetCurrent(void **c)
{
	if (!c)
		return E_INVALID_VALUE;
	*c = &ctx_token;
	return OK;
}

CUresult cuStreamCreate(void **out, unsigned flags)
{
	(void)flags;
	if (!out)
		return E_INVALID_VALUE;
	struct stream *s = calloc(1, sizeof *s);
	s->magic = STREAM_MAGIC;
	*out = s;
	return OK;
}

CUresult cuStreamDestroy_v2(void *h)
{
	uintptr_t v = (uintptr_t)h;
	struct stream *s = v > 2 ? get_stream(h, 0) : NULL;
	if (!s)
		return E_INVALID_HANDLE;
	s->magic = 0; /* kept, not freed: a stale handle stays detectable */
	return OK;
}

CUresult cuEventCreate(void **out, unsigned flags)
{
	if (!out)
		return E_INVALID_VALUE;
	struct event *e = calloc(1, sizeof *e);
	e->magic = EVENT_MAGIC;
	e->flags = flags;
	*out = e;
	return OK;
}

CUresult cuEventDestroy_v2(void *h)
{
	struct event *e = get_event(h);
	if (!e)
		return E_INVALID_HANDLE;
	e->magic = 0;
	return OK;
}

static CUresult launch(void *f, void *sh, void **params, int ptsz)
{
	struct stream *s = get_stream(sh, ptsz);
	if (!s || !f)
		return E_INVALID_HANDLE;
	int64_t d = params && params[0] ? *(int64_t *)params[0] : 0;
	pthread_mutex_lock(&mu);
	int64_t start = s->tail > now() ? s->tail : now();
	s->tail = start + (d < 0 ? -d : d);
	if (d < 0)
		s->err = E_LAUNCH_FAILED;
	if (s->tail > all_tail)
		all_tail = s->tail;
	pthread_mutex_unlock(&mu);
	atomic_fetch_add(&standin_launches, 1);
	return OK;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			unsigned shm, void *s, void **params, void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)extra;
	return launch(f, s, params, 0);
}

CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			     unsigned shm, void *s, void **params, void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)extra;
	return launch(f, s, params, 1);
}

static CUresult record(void *eh, void *sh, int ptsz)
{
	struct event *e = get_event(eh);
	struct stream *s = get_stream(sh, ptsz);
	if (!e || !s)
		return E_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	e->done = s->tail;
	e->err = s->err;
	e->recorded = 1;
	pthread_mutex_unlock(&mu);
	return OK;
}

CUresult cuEventRecord(void *e, void *s) { return record(e, s, 0); }
CUresult cuEventRecord_ptsz(void *e, void *s) { return record(e, s, 1); }

/* snapshot copies event h under mu into *out; 0 when h is no event. */
static int snapshot(void *h, struct event *out)
{
	struct event *e = get_event(h);
	if (!e)
		return 0;
	pthread_mutex_lock(&mu);
	*out = *e;
	pthread_mutex_unlock(&mu);
	return 1;
}

CUresult cuEventQuery(void *h)
{
	atomic_fetch_add(&standin_queries, 1);
	struct event e;
	if (!snapshot(h, &e))
		return E_INVALID_HANDLE;
	if (!e.recorded)
		return OK;
	return now() < e.done ? E_NOT_READY : e.err;
}

static CUresult event_sync(void *h)
{
	struct event e;
	if (!snapshot(h, &e))
		return E_INVALID_HANDLE;
	if (!e.recorded)
		return OK;
	if (e.flags & 1) {
		if (now() < e.done)
			atomic_fetch_add(&standin_blocking_waits, 1);
		sleep_until(e.done);
	} else {
		spin_until(e.done);
	}
	return e.err;
}

CUresult cuStreamWaitEvent(void *sh, void *eh, unsigned flags)
{
	(void)flags;
	struct stream *s = get_stream(sh, 0);
	struct event *e = get_event(eh);
	if (!s || !e)
		return E_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	if (e->recorded && e->done > s->tail)
		s->tail = e->done;
	pthread_mutex_unlock(&mu);
	return OK;
}

static CUresult squery(void *h, int ptsz)
{
	atomic_fetch_add(&standin_queries, 1);
	struct stream *s = get_stream(h, ptsz);
	if (!s)
		return E_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	int64_t t = s->tail;
	int err = s->err;
	pthread_mutex_unlock(&mu);
	return now() < t ? E_NOT_READY : err;
}
CUresult cuStreamQuery(void *h) { return squery(h, 0); }
CUresult cuStreamQuery_ptsz(void *h) { return squery(h, 1); }

static CUresult ssync(void *h, int ptsz)
{
	struct stream *s = get_stream(h, ptsz);
	if (!s)
		return E_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	int64_t t = s->tail;
	pthread_mutex_unlock(&mu);
	wait_until(t);
	return s->err;
}
CUresult cuStreamSynchronize(void *h) { return ssync(h, 0); }
CUresult cuStreamSynchronize_ptsz(void *h) { return ssync(h, 1); }

CUresult cuCtxSynchronize(void)
{
	pthread_mutex_lock(&mu);
	int64_t t = all_tail;
	pthread_mutex_unlock(&mu);
	wait_until(t);
	return OK;
}

/* Test helpers: when an event completes (or completed), and with what. */
int64_t standin_event_done_at(void *h)
{
	struct event *e = get_event(h);
	return e ? e->done : -1;
}
int standin_event_result(void *h)
{
	struct event *e = get_event(h);
	return e ? e->err : E_INVALID_HANDLE;
}

CUresult cuEventSynchronize(void *h) { return event_sync(h); }

/* What cuGetProcAddress hands out for cuEventSynchronize is not the
 * exported symbol (real drivers may do this too): the interposer must
 * recognise it by what cuGetProcAddress returned at its init. */
static CUresult event_sync_entry(void *h) { return event_sync(h); }

struct sym {
	const char *name;
	void *fn, *ptsz;
};
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status);
static const struct sym syms[] = {
#define S(n) {#n, (void *)n, NULL}
#define P(n) {#n, (void *)n, (void *)n##_ptsz}
	S(cuInit), S(cuDriverGetVersion), S(cuCtxGetCurrent), S(cuCtxGetFlags), S(cuCtxSetFlags), S(cuStreamCreate), S(cuEventCreate),
	{"cuStreamDestroy", (void *)cuStreamDestroy_v2, NULL}, {"cuEventDestroy", (void *)cuEventDestroy_v2, NULL},
	P(cuLaunchKernel), P(cuEventRecord), S(cuEventQuery), {"cuEventSynchronize", (void *)event_sync_entry, NULL}, S(cuStreamWaitEvent),
	P(cuStreamQuery), P(cuStreamSynchronize), S(cuCtxSynchronize),
	{"cuGetProcAddress", (void *)cuGetProcAddress_v2, NULL}, /* what CUDA 12+ hands out */
};

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status)
{
	(void)ver;
	if (!sym || !pfn)
		return E_INVALID_VALUE;
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		if (strcmp(sym, syms[i].name) == 0) {
			*pfn = (flags & 2) && syms[i].ptsz ? syms[i].ptsz : syms[i].fn;
			if (status)
				*status = 0;
			return OK;
		}
	}
	*pfn = NULL;
	if (status)
		*status = 1;
	return E_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
