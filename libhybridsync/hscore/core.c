/* The C core of libhybridsync, its lowest layer: finds CUDA at run time,
 * performs the waits the Go policy asks for, and keeps the launch registry.
 * It calls only CUDA and libc, never the layers above it (libhybridsync's
 * C files, Go through hscore.go). No CUDA headers, no CUDA at build time
 * (cuda_abi.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

void *hs_real[HS_SYM_COUNT];

#define HS_NAME(api, name, hooked, observe, ret, params, args) #name,
const char *const hs_sym_name[HS_SYM_COUNT] = {HS_CUDA_SYMBOLS(HS_NAME)};
#undef HS_NAME
#define HS_HOOKED(api, name, hooked, observe, ret, params, args) hooked,
const int hs_sym_hooked[HS_SYM_COUNT] = {HS_CUDA_SYMBOLS(HS_HOOKED)};
#undef HS_HOOKED
#define HS_IS_RT_DRV 0
#define HS_IS_RT_RT 1
#define HS_RUNTIME(api, name, hooked, observe, ret, params, args) HS_IS_RT_##api,
const int hs_sym_runtime[HS_SYM_COUNT] = {HS_CUDA_SYMBOLS(HS_RUNTIME)};
#undef HS_RUNTIME
_Static_assert(sizeof hs_sym_name / sizeof hs_sym_name[0] == HS_SYM_COUNT, "symbol tables out of step");

/* ---- logging, fork ---- */

static _Atomic int log_level;
atomic_int hs_forked, hs_loaded; /* see core.h */

#define HS_LOG_NAME(level, name) name,
const char *const hs_log_level_name[HS_LOG_COUNT] = {HS_LOG_LEVELS(HS_LOG_NAME)};
#undef HS_LOG_NAME

int hs_parse_log_level(const char *s)
{
	if (s == NULL || *s == 0)
		return HS_LOG_OFF;
	for (int i = 0; i < HS_LOG_COUNT; i++)
		if (strcmp(s, hs_log_level_name[i]) == 0)
			return i;
	return -1;
}

void hs_set_log_level(int level) { atomic_store(&log_level, level); }

/* One write(2) per line, to stderr only, and no stdio: the host program
 * owns stdout and stdio's locks. */
static void vlog(const char *fmt, va_list ap)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "hybridsync[%d]: ", (int)getpid());
	int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
	if (m < 0)
		return;
	n += m < (int)(sizeof buf - n - 1) ? m : (int)(sizeof buf - n - 2);
	buf[n++] = '\n';
	ssize_t w = write(2, buf, n);
	(void)w;
}

void hs_log(int level, const char *fmt, ...)
{
	if (level > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

int hs_log_enabled(int level) { return level <= atomic_load_explicit(&log_level, memory_order_relaxed); }

static void log_always(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

/* A user's mistake (a bad HYBRIDSYNC_* value) is said whatever the log
 * level: off silences the library's chatter, not what the user asked
 * for and will not get. */
void hs_log_user(const char *msg) { log_always("%s", msg); }

/* A child of fork() has none of the Go runtime's threads: it must never
 * call into Go, so every entry point checks this and passes through. */
static void on_fork_child(void) { atomic_store(&hs_forked, 1); }

/* HYBRIDSYNC_LOG as hybridsync.ParseConfig reads it, blanks around it
 * ignored; one that is too long for any level is left as it is (bad). */
static const char *log_env(char *buf, size_t n)
{
	static const char blanks[] = " \t\n\v\f\r";
	const char *v = getenv("HYBRIDSYNC_LOG");
	if (v == NULL)
		return NULL;
	v += strspn(v, blanks);
	size_t len = strlen(v);
	while (len > 0 && strchr(blanks, v[len - 1]))
		len--;
	if (len >= n)
		return v;
	memcpy(buf, v, len);
	buf[len] = 0;
	return buf;
}

__attribute__((constructor)) static void core_init(void)
{
	char buf[16];
	const char *v = log_env(buf, sizeof buf);
	int l = hs_parse_log_level(v);
	/* A bad level is reported when the configuration is checked; until
	 * then errors are said (whoever set the variable wants a log). */
	hs_set_log_level(l < 0 ? HS_LOG_ERROR : l);
	pthread_atfork(NULL, NULL, on_fork_child);
}

/* ---- finding CUDA ---- */

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) real_dlsym;

/* The interposer replaces dlsym; libc's is found by version, which dlvsym
 * (not replaced) can do without recursing. */
void *hs_real_dlsym(void *handle, const char *name)
{
	dlsym_fn f = atomic_load_explicit(&real_dlsym, memory_order_acquire);
	if (f == NULL) {
		static const char *const vers[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
		for (size_t i = 0; f == NULL && i < sizeof vers / sizeof vers[0]; i++)
			f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", vers[i]);
		if (f == NULL)
			return NULL;
		atomic_store_explicit(&real_dlsym, f, memory_order_release);
	}
	return f(handle, name);
}

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static void *driver;
static char load_err[256];
static int load_rc = -1;
/* alt[i]: what the driver's cuGetProcAddress hands out for symbol i, which
 * need not be the exported symbol's address. */
void *hs_alt[HS_SYM_COUNT];

static void load(void)
{
	const char *path = getenv("HYBRIDSYNC_CUDA_LIB");
	if (path == NULL || *path == 0)
		path = "libcuda.so.1";
	driver = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (driver == NULL) {
		const char *e = dlerror();
		snprintf(load_err, sizeof load_err, "cannot load the CUDA driver %s: %s", path, e ? e : "unknown error");
		return;
	}
	for (int i = 0; i < HS_SYM_COUNT; i++)
		if (!hs_sym_runtime[i])
			hs_real[i] = hs_real_dlsym(driver, hs_sym_name[i]);
	if (hs_real[HS_SYM_cuEventQuery] == NULL || hs_real[HS_SYM_cuEventSynchronize] == NULL ||
	    hs_real[HS_SYM_cuStreamQuery] == NULL || hs_real[HS_SYM_cuStreamSynchronize] == NULL ||
	    hs_real[HS_SYM_cuCtxSynchronize] == NULL || hs_real[HS_SYM_cuEventCreate] == NULL ||
	    hs_real[HS_SYM_cuEventRecord] == NULL) {
		snprintf(load_err, sizeof load_err, "%s lacks the event and stream functions (not a CUDA driver?)", path);
		return;
	}
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, int *) = HS_REAL(cuGetProcAddress_v2);
	for (int i = 0; gpa != NULL && i < HS_SYM_COUNT; i++) {
		if (hs_sym_runtime[i] || !hs_sym_hooked[i])
			continue;
		char base[64];
		snprintf(base, sizeof base, "%s", hs_sym_name[i]);
		char *p = strstr(base, "_ptsz");
		cuuint64_t flags = 0;
		if (p) {
			*p = 0;
			flags = HS_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
		}
		int status = 0;
		void *fn = NULL;
		/* 12000: the first ABI of each of these; a caller asking for a
		 * newer, different ABI gets another pointer, which the
		 * interposer then leaves alone. */
		if (gpa(base, &fn, 12000, flags, &status) == 0)
			hs_alt[i] = fn;
	}
	load_rc = 0;
	atomic_store_explicit(&hs_loaded, 1, memory_order_release);
}

int hs_core_load_once(void)
{
	pthread_once(&load_once, load);
	return load_rc;
}

const char *hs_core_error(void) { return load_err; }
void *hs_core_driver_handle(void) { return driver; }
void *hs_core_sym(const char *name) { return driver ? hs_real_dlsym(driver, name) : NULL; }

static int is_ours(void *p)
{
	Dl_info a, b;
	return dladdr(p, &a) && dladdr((void *)is_ours, &b) && a.dli_fbase == b.dli_fbase;
}

static int find_cudart(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	if (info->dlpi_name && strstr(info->dlpi_name, "libcudart.so")) {
		*(const char **)data = info->dlpi_name;
		return 1;
	}
	return 0;
}

void *hs_core_runtime_find(enum hs_sym s)
{
	void *p = hs_real_dlsym(RTLD_NEXT, hs_sym_name[s]);
	if (p == NULL || is_ours(p)) {
		/* Not in the global scope: a libcudart loaded RTLD_LOCAL (by a
		 * Python extension, say) is found among the loaded objects. */
		p = NULL;
		const char *path = NULL;
		dl_iterate_phdr(find_cudart, &path);
		const char *env = getenv("HYBRIDSYNC_CUDART_LIB");
		void *h = NULL;
		if (path)
			h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
		if (h == NULL && env && *env)
			h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
		if (h) {
			p = hs_real_dlsym(h, hs_sym_name[s]);
			if (p && is_ours(p))
				p = NULL;
		}
	}
	if (p)
		atomic_store_explicit((_Atomic(void *) *)&hs_real[s], p, memory_order_release);
	return p;
}

/* ---- the waits ---- */

static CUstream wait_stream(struct hs_wait *w)
{
	CUstream s = (CUstream)w->handle;
	if (s == NULL && w->ptsz)
		return HS_CU_STREAM_PER_THREAD;
	return s;
}

int hs_core_query(struct hs_wait *w)
{
	switch (w->kind) {
	case HS_WAIT_EVENT:
		return HS_REAL(cuEventQuery)((CUevent)w->handle);
	case HS_WAIT_STREAM:
		return HS_REAL(cuStreamQuery)(wait_stream(w));
	default:
		/* The legacy stream orders after every blocking stream's
		 * work; hs_core_finish covers the rest. */
		return HS_REAL(cuStreamQuery)(HS_CU_STREAM_LEGACY);
	}
}

int hs_core_finish(struct hs_wait *w)
{
	switch (w->kind) {
	case HS_WAIT_EVENT:
		return HS_REAL(cuEventSynchronize)((CUevent)w->handle);
	case HS_WAIT_STREAM:
		if (w->ptsz && hs_real[HS_SYM_cuStreamSynchronize_ptsz])
			return HS_REAL(cuStreamSynchronize_ptsz)((CUstream)w->handle);
		return HS_REAL(cuStreamSynchronize)(wait_stream(w));
	default:
		return HS_REAL(cuCtxSynchronize)();
	}
}

int hs_core_autowait(struct hs_wait *w) { return hs_core_finish(w); }

/* The schedule is a property of the context, not of a wait: switched, it
 * makes CUDA's own stream and context waits block, the driver's internal
 * ones too (a synchronous copy's), exactly as in a program that chose
 * blocking-sync mode. Event waits it leaves alone, as that mode does: an
 * event blocks only if it was created with CU_EVENT_BLOCKING_SYNC, whatever
 * the schedule, before or after a switch (experiments/paper/device/ctxflags.cu;
 * docs/BENCHMARKS.md, "Event waits and CUDA's schedule flags"). The
 * program's events stay as created (making them blocking bought nothing);
 * the policy arm's event waits block on shadow events (hs_core_block, from
 * wait.c), its stream waits on this schedule, not on a shadow per wait
 * (docs/tried.md: "Blocking on a shadow event for every wait"). The thread remembers the context it switched
 * and its flags, and switches back only that one. */
#define HS_CU_CTX_SCHED_MASK 0x07
#define HS_CU_CTX_SCHED_BLOCKING_SYNC 0x04
static __thread CUcontext sched_ctx __attribute__((tls_model("initial-exec")));
static __thread unsigned sched_orig __attribute__((tls_model("initial-exec")));
static CUresult (*ctx_get_flags)(unsigned *);
static CUresult (*ctx_set_flags)(unsigned);
static pthread_once_t sched_once = PTHREAD_ONCE_INIT;

static void sched_resolve(void)
{
	ctx_get_flags = (CUresult(*)(unsigned *))hs_core_sym("cuCtxGetFlags");
	ctx_set_flags = (CUresult(*)(unsigned))hs_core_sym("cuCtxSetFlags");
}

int hs_core_sched_blocking(int on)
{
	pthread_once(&sched_once, sched_resolve);
	CUcontext ctx = NULL;
	if (!ctx_get_flags || !ctx_set_flags || HS_REAL(cuCtxGetCurrent)(&ctx) != 0 || ctx == NULL)
		return -1;
	if (!on) {
		if (sched_ctx == ctx)
			ctx_set_flags(sched_orig);
		sched_ctx = NULL;
		return 0;
	}
	if (sched_ctx == ctx)
		return 0;
	unsigned f;
	if (ctx_get_flags(&f) != 0 || ctx_set_flags((f & ~HS_CU_CTX_SCHED_MASK) | HS_CU_CTX_SCHED_BLOCKING_SYNC) != 0)
		return -1;
	sched_ctx = ctx;
	sched_orig = f;
	return 0;
}

/* Shadow events: a stream of our own and a blocking-sync event, per
 * context, taken by one blocking wait at a time. Few waits block at once,
 * so a small pool under a mutex (held for no CUDA call) is enough. */
struct shadow {
	CUcontext ctx;
	CUstream stream;
	CUevent ev;
	int busy;
};
#define SHADOWS 64
static struct shadow shadows[SHADOWS];
static pthread_mutex_t shadow_mu = PTHREAD_MUTEX_INITIALIZER;

static struct shadow *shadow_take(CUcontext ctx)
{
	struct shadow *free_slot = NULL;
	pthread_mutex_lock(&shadow_mu);
	for (int i = 0; i < SHADOWS; i++) {
		struct shadow *s = &shadows[i];
		if (!s->busy && s->ctx == ctx) {
			s->busy = 1;
			pthread_mutex_unlock(&shadow_mu);
			return s;
		}
		if (!s->busy && s->ctx == NULL && free_slot == NULL)
			free_slot = s;
	}
	if (free_slot)
		free_slot->busy = 1;
	pthread_mutex_unlock(&shadow_mu);
	if (free_slot == NULL)
		return NULL;
	/* Created in the calling thread's current context, which is ctx. */
	if (HS_REAL(cuStreamCreate)(&free_slot->stream, HS_CU_STREAM_NON_BLOCKING) != 0) {
		free_slot->busy = 0;
		return NULL;
	}
	if (HS_REAL(cuEventCreate)(&free_slot->ev, HS_CU_EVENT_BLOCKING_SYNC | HS_CU_EVENT_DISABLE_TIMING) != 0) {
		HS_REAL(cuStreamDestroy_v2)(free_slot->stream);
		free_slot->busy = 0;
		return NULL;
	}
	free_slot->ctx = ctx; /* written while busy: no other thread looks */
	return free_slot;
}

static void shadow_put(struct shadow *s)
{
	pthread_mutex_lock(&shadow_mu);
	s->busy = 0;
	pthread_mutex_unlock(&shadow_mu);
}

/* shadow_drop discards a pair that failed (its context may be gone). */
static void shadow_drop(struct shadow *s)
{
	HS_REAL(cuEventDestroy_v2)(s->ev);
	HS_REAL(cuStreamDestroy_v2)(s->stream);
	pthread_mutex_lock(&shadow_mu);
	s->ctx = NULL;
	s->busy = 0;
	pthread_mutex_unlock(&shadow_mu);
}

int hs_core_block(struct hs_wait *w)
{
	CUcontext ctx = NULL;
	if (HS_REAL(cuCtxGetCurrent)(&ctx) != 0 || ctx == NULL) {
		hs_log(HS_LOG_DEBUG, "no current context: blocking wait falls back to CUDA's own");
		return hs_core_finish(w);
	}
	struct shadow *s = shadow_take(ctx);
	if (s == NULL) {
		hs_log(HS_LOG_WARN, "no shadow event available: CUDA's own wait used");
		return hs_core_finish(w);
	}
	CUresult r;
	switch (w->kind) {
	case HS_WAIT_EVENT:
		/* Our stream waits for the event, so the shadow completes
		 * when the event does, whatever was queued after it. */
		r = HS_REAL(cuStreamWaitEvent)(s->stream, (CUevent)w->handle, 0);
		if (r == 0)
			r = HS_REAL(cuEventRecord)(s->ev, s->stream);
		break;
	case HS_WAIT_STREAM:
		r = HS_REAL(cuEventRecord)(s->ev, wait_stream(w));
		break;
	default:
		r = HS_REAL(cuEventRecord)(s->ev, HS_CU_STREAM_LEGACY);
		break;
	}
	if (r == 0)
		r = HS_REAL(cuEventSynchronize)(s->ev);
	if (r != 0) {
		hs_log(HS_LOG_DEBUG, "shadow wait failed (%d): CUDA's own wait used", r);
		shadow_drop(s);
	} else {
		shadow_put(s);
	}
	/* The work is complete (or failed); the real call gives its exact
	 * result without waiting. */
	return hs_core_finish(w);
}

/* ---- launch registry ---- */

struct reg_slot {
	atomic_uint seq; /* odd while written; 0: never written */
	_Atomic uintptr_t key;
	_Atomic uint64_t kernel;
	_Atomic int64_t t;
};
#define REG_SLOTS 4096
static struct reg_slot reg_streams[REG_SLOTS], reg_events[REG_SLOTS], reg_kernels[REG_SLOTS];

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Direct-mapped: a collision overwrites, a writer that races another on
 * the same slot gives up. Either only loses one sample. */
static void reg_put(struct reg_slot *tab, uintptr_t key, uint64_t k, int64_t t)
{
	struct reg_slot *s = &tab[mix(key) & (REG_SLOTS - 1)];
	unsigned q = atomic_load_explicit(&s->seq, memory_order_relaxed);
	if ((q & 1) || !atomic_compare_exchange_strong_explicit(&s->seq, &q, q + 1, memory_order_acquire,
								 memory_order_relaxed))
		return;
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->key, key, memory_order_relaxed);
	atomic_store_explicit(&s->kernel, k, memory_order_relaxed);
	atomic_store_explicit(&s->t, t, memory_order_relaxed);
	atomic_store_explicit(&s->seq, q + 2, memory_order_release);
}

static int reg_get(struct reg_slot *tab, uintptr_t key, uint64_t *k, int64_t *t)
{
	struct reg_slot *s = &tab[mix(key) & (REG_SLOTS - 1)];
	unsigned q = atomic_load_explicit(&s->seq, memory_order_acquire);
	if (q == 0 || (q & 1))
		return 0;
	uintptr_t kk = atomic_load_explicit(&s->key, memory_order_relaxed);
	uint64_t kern = atomic_load_explicit(&s->kernel, memory_order_relaxed);
	int64_t tt = atomic_load_explicit(&s->t, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->seq, memory_order_relaxed) != q || kk != key)
		return 0;
	*k = kern;
	*t = tt;
	return 1;
}

/* Stream handle 0 and CU_STREAM_LEGACY are the same stream. */
static uintptr_t stream_key(void *s) { return (uintptr_t)s == 1 ? 0 : (uintptr_t)s; }

void hs_reg_launch(void *stream, uint64_t kernel, int64_t t)
{
	reg_put(reg_streams, stream_key(stream), kernel, t);
	if (kernel)
		reg_put(reg_kernels, kernel, kernel, t);
}

/* The thread's last observed launch, not yet in the shared table: a
 * program launches many kernels per wait, on one stream per thread as a
 * rule, and records or waits from the launching thread, so most launches
 * need only these plain stores (the shared table's slot costs an atomic
 * exchange and a hash). It goes to the table when the thread launches on
 * another stream, and every PUBLISH_EVERY launches, so that a wait from
 * another thread sees a launch at most that many behind.
 *
 * An observed launch carries no time: a clock read would cost about half
 * of what observing a launch does (launchbench).
 * What the policy needs is when the awaited work was queued: an event
 * record takes the time (it follows the launches it covers), and a
 * stream or device wait counts from its own start (hs_wait). */
#define PUBLISH_EVERY 16
static __thread struct {
	uintptr_t stream;
	uint64_t kernel;
	unsigned unpublished; /* launches since the last publish; 0: nothing pending */
	int set;
} last_launch __attribute__((tls_model("initial-exec")));

static void publish_last_launch(void)
{
	if (last_launch.unpublished) {
		reg_put(reg_streams, last_launch.stream, last_launch.kernel, 0);
		last_launch.unpublished = 0;
	}
}

/* reg_observed is hs_reg_launch for an interposed launch: only the
 * stream's last launch is kept (by-kernel lookups serve the explicit API),
 * with no time (a stream lookup then gives time 0). */
static inline void reg_observed(void *stream, uint64_t kernel)
{
	uintptr_t key = stream_key(stream);
	if (last_launch.unpublished && last_launch.stream != key)
		publish_last_launch();
	last_launch.stream = key, last_launch.kernel = kernel, last_launch.set = 1;
	if (++last_launch.unpublished >= PUBLISH_EVERY)
		publish_last_launch();
}

/* stream_last finds the last launch on stream: this thread's own if it
 * launched there last, else the shared table's. */
static int stream_last(uintptr_t key, uint64_t *k, int64_t *t)
{
	if (last_launch.set && last_launch.stream == key) {
		*k = last_launch.kernel;
		*t = 0;
		return 1;
	}
	return reg_get(reg_streams, key, k, t);
}

/* An event's entry: the stream's last launch, and the time of its
 * launch, or of the record for an observed launch (which has none). */
void hs_reg_record(void *event, void *stream)
{
	uint64_t k;
	int64_t t;
	if (stream_last(stream_key(stream), &k, &t))
		reg_put(reg_events, (uintptr_t)event, k, t ? t : hs_now());
	else
		reg_put(reg_events, (uintptr_t)event, 0, 0);
}

int hs_reg_event(void *event, uint64_t *kernel, int64_t *t) { return reg_get(reg_events, (uintptr_t)event, kernel, t); }

/* A record is good for one completion: once a wait has seen it, the entry
 * is forgotten, if it is still the one the wait read (kernel, t). Else a
 * record the interposer did not see (inside a CUDA graph, or with the
 * hooks off) would leave the old record's time in place, and the next
 * wait would learn the time since then as the kernel's: on the GPU, an
 * empty kernel learned 1.9 s that way, and the policy then slept for it. */
void hs_reg_event_done(void *event, uint64_t kernel, int64_t t)
{
	uint64_t k;
	int64_t tt;
	if (kernel && reg_get(reg_events, (uintptr_t)event, &k, &tt) && k == kernel && tt == t)
		reg_put(reg_events, (uintptr_t)event, 0, 0);
}
int hs_reg_stream(void *stream, uint64_t *kernel, int64_t *t) { return stream_last(stream_key(stream), kernel, t); }

int64_t hs_reg_kernel_launched(uint64_t kernel)
{
	uint64_t k;
	int64_t t;
	return reg_get(reg_kernels, kernel, &k, &t) && k == kernel ? t : 0;
}

/* ---- kernel identity ---- */

struct kname {
	_Atomic uint64_t id; /* 0: free; set once by CAS, then the rest */
	_Atomic int ready;
	const void *fn;
	unsigned g[3], b[3];
};
#define KNAMES 512
#define KPROBE 16
static struct kname knames[KNAMES];

/* The thread's recent kernels, direct-mapped by function: a program
 * launches the same few kernels over and over (8 alternating in the CuPy
 * stencil of experiments/apps), and the id's hashing and name
 * registration need not be repeated for each launch. */
#define KCACHE 16
static __thread struct {
	const void *fn;
	uint64_t shape[3]; /* the six dimensions, as three words to compare */
	uint64_t id;
} kcache[KCACHE] __attribute__((tls_model("initial-exec")));

/* noinline: the cache hit, on every launch, then needs no saved registers. */
__attribute__((noinline)) static uint64_t kernel_id(const void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
						 unsigned by, unsigned bz);

void hs_launch_observed(void *stream, const void *fn, uint64_t g01, uint64_t g2b0, uint64_t b12)
{
	__typeof__(&kcache[0]) c = &kcache[((uintptr_t)fn >> 4 ^ g01) & (KCACHE - 1)];
	uint64_t id = c->id;
	if (id == 0 || c->fn != fn || c->shape[0] != g01 || c->shape[1] != g2b0 || c->shape[2] != b12) {
		id = kernel_id(fn, (uint32_t)g01, g01 >> 32, (uint32_t)g2b0, g2b0 >> 32, (uint32_t)b12, b12 >> 32);
		c->fn = fn;
		c->shape[0] = g01, c->shape[1] = g2b0, c->shape[2] = b12;
		c->id = id;
	}
	reg_observed(stream, id);
}

static uint64_t kernel_id(const void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz)
{
	uint64_t h = mix((uintptr_t)fn);
	h = mix(h ^ ((uint64_t)gx << 32 | gy));
	h = mix(h ^ ((uint64_t)gz << 32 | bx));
	h = mix(h ^ ((uint64_t)by << 32 | bz));
	h |= 1; /* 0 is "unknown kernel" */
	/* Remember how to name it: a short linear probe; a full table only
	 * leaves later kernels unnamed in the stats. */
	for (int i = 0; i < KPROBE; i++) {
		struct kname *n = &knames[(h + i) & (KNAMES - 1)];
		uint64_t cur = atomic_load_explicit(&n->id, memory_order_acquire);
		if (cur == h)
			break;
		if (cur != 0)
			continue;
		if (atomic_compare_exchange_strong(&n->id, &cur, h)) {
			n->fn = fn;
			n->g[0] = gx, n->g[1] = gy, n->g[2] = gz;
			n->b[0] = bx, n->b[1] = by, n->b[2] = bz;
			atomic_store_explicit(&n->ready, 1, memory_order_release);
			break;
		}
		if (cur == h)
			break;
	}
	return h;
}

int hs_kernel_describe(uint64_t id, char *buf, size_t len)
{
	struct kname *n = NULL;
	for (int i = 0; i < KPROBE && n == NULL; i++) {
		struct kname *c = &knames[(id + i) & (KNAMES - 1)];
		if (atomic_load_explicit(&c->id, memory_order_acquire) == id)
			n = c;
	}
	if (n == NULL || !atomic_load_explicit(&n->ready, memory_order_acquire))
		return 0;
	Dl_info di;
	const char *sym = NULL;
	if (dladdr(n->fn, &di) && di.dli_sname && di.dli_saddr == n->fn)
		sym = di.dli_sname;
	char fnbuf[32];
	if (sym == NULL && !dladdr(n->fn, &di)) {
		/* Not host code: a CUfunction from the driver API. */
		CUresult (*getname)(const char **, const void *) =
			(CUresult(*)(const char **, const void *))hs_core_sym("cuFuncGetName");
		const char *name = NULL;
		if (getname && getname(&name, n->fn) == 0 && name)
			sym = name;
	}
	if (sym == NULL) {
		snprintf(fnbuf, sizeof fnbuf, "fn@%p", n->fn);
		sym = fnbuf;
	}
	snprintf(buf, len, "%s<<<(%u,%u,%u),(%u,%u,%u)>>>", sym, n->g[0], n->g[1], n->g[2], n->b[0], n->b[1], n->b[2]);
	return 1;
}

void hs_log_str(int level, const char *msg) { hs_log(level, "%s", msg); }

