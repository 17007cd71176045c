/* Internal interface of the library's C core: CUDA found at run time, the
 * waits the Go policy drives (query, blocking shadow wait, CUDA's own wait),
 * the launch registry that gives events their kernel and launch time, and
 * the small amount of process state (fork, logging) the C side owns.
 * Not installed; the public header is include/hybridsync.h. */
#ifndef HS_CORE_H
#define HS_CORE_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include "cuda_abi.h"

/* What a wait is for. */
enum { HS_WAIT_EVENT = 0, HS_WAIT_STREAM = 1, HS_WAIT_CTX = 2 };

/* One wait in progress: owned by the waiting thread for the duration of one
 * sync call (C stack or Go memory; holds no Go pointers). */
struct hs_wait {
	void *handle;     /* CUevent or CUstream; unused for HS_WAIT_CTX */
	int kind;         /* HS_WAIT_* */
	int ptsz;         /* stream handle 0 means the per-thread default stream */
	uint64_t kernel;  /* kernel id, 0 when unknown */
	int64_t launched; /* CLOCK_MONOTONIC ns of that kernel's launch (or of
			   * its event's record, or of the wait's start for
			   * an observed launch), 0 if unknown */
};

/* real[] holds the CUDA functions found at run time, by enum hs_sym. */
extern void *hs_real[HS_SYM_COUNT];
extern const char *const hs_sym_name[HS_SYM_COUNT];
extern const int hs_sym_hooked[HS_SYM_COUNT];
extern const int hs_sym_runtime[HS_SYM_COUNT];
#define HS_REAL(name) ((__typeof__(&name))hs_real[HS_SYM_##name])

/* Every hooked call (thousands a second in a launch-bound program) checks
 * that the driver is loaded and that this is not a forked child, and a
 * runtime hook finds the real function: inline reads of flags set once,
 * with calls into core.c only until then. */
extern atomic_int hs_loaded, hs_forked;

/* hs_core_loaded: load finished and succeeded (never blocks). */
static inline int hs_core_loaded(void) { return atomic_load_explicit(&hs_loaded, memory_order_acquire); }

/* hs_core_load opens the driver (HYBRIDSYNC_CUDA_LIB or libcuda.so.1) and
 * resolves every symbol once. Idempotent and thread-safe. Returns 0, or -1
 * with a message in hs_core_error(). */
int hs_core_load_once(void);
static inline int hs_core_load(void) { return hs_core_loaded() ? 0 : hs_core_load_once(); }
extern void *hs_alt[HS_SYM_COUNT];
const char *hs_core_error(void);
void *hs_core_driver_handle(void);
/* hs_core_sym looks a further driver symbol up in the loaded driver. */
void *hs_core_sym(const char *name);
/* hs_core_runtime resolves a runtime symbol late: libcudart is often loaded
 * after this library (dlopen by Python, for one). */
void *hs_core_runtime_find(enum hs_sym s);
static inline void *hs_core_runtime(enum hs_sym s)
{
	void *p = atomic_load_explicit((void *_Atomic *)&hs_real[s], memory_order_acquire);
	return p ? p : hs_core_runtime_find(s);
}
/* hs_real_dlsym is libc's dlsym, which the interposer replaces. */
void *hs_real_dlsym(void *handle, const char *name);

/* The waits. Each returns a CUresult; query returns HS_CUDA_ERROR_NOT_READY
 * while the work runs. block waits on a blocking-sync shadow event recorded
 * now (so only waits that actually block pay its interrupt), then returns
 * the code the real synchronize gives for the completed work. */
int hs_core_query(struct hs_wait *w);
int hs_core_block(struct hs_wait *w);
int hs_core_autowait(struct hs_wait *w);
/* Switch the calling thread's current context to CUDA's blocking-sync
 * schedule (on) or back to the schedule it had (off): 0, or -1 where the
 * driver cannot (no cuCtxSetFlags, before CUDA 12.1). */
int hs_core_sched_blocking(int on);
/* hs_core_finish returns the exact code of the real synchronize for work
 * known to be complete (fast: nothing left to wait for). */
int hs_core_finish(struct hs_wait *w);

/* The launch registry (lock-free, bounded; a lost entry only means an
 * unknown kernel for one wait). */
void hs_reg_launch(void *stream, uint64_t kernel, int64_t t);
void hs_reg_record(void *event, void *stream);
int hs_reg_event(void *event, uint64_t *kernel, int64_t *t);
void hs_reg_event_done(void *event, uint64_t kernel, int64_t t);
int hs_reg_stream(void *stream, uint64_t *kernel, int64_t *t);
int64_t hs_reg_kernel_launched(uint64_t kernel);
/* hs_launch_observed records an interposed launch of fn on stream: its
 * kernel id, derived from function and shape (cached per thread), becomes
 * the stream's last launch, with no time (see core.c); hs_kernel_describe
 * names an id for the stats. The shape comes as three words, grid x | y,
 * grid z | block x, block y | z (hs_shape_word), built in registers: six
 * 4-byte stores read back as three 8-byte words would stall store
 * forwarding on every launch. */
void hs_launch_observed(void *stream, const void *fn, uint64_t g01, uint64_t g2b0, uint64_t b12);
static inline uint64_t hs_shape_word(unsigned lo, unsigned hi) { return (uint64_t)hi << 32 | lo; }
int hs_kernel_describe(uint64_t id, char *buf, size_t len);

/* hs_now reads CLOCK_MONOTONIC (ns), the clock hybridsync.Now reads;
 * inline: every wait of the default mode reads it. */
static inline int64_t hs_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Process state. */
/* this is not the process that loaded us */
static inline int hs_in_forked_child(void) { return atomic_load_explicit(&hs_forked, memory_order_relaxed); }
void hs_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* hs_log_enabled: hs_log at level would write (for lines that cost
 * something to put together). */
int hs_log_enabled(int level);
void hs_set_log_level(int level);
/* The log levels, by number: HYBRIDSYNC_LOG's names. hybridsync.LogLevels
 * is the Go side's list, checked against this one (hscore's tests). */
#define HS_LOG_LEVELS(X) X(OFF, "off") X(ERROR, "error") X(WARN, "warn") X(INFO, "info") X(DEBUG, "debug")
#define HS_LOG_ENUM(level, name) HS_LOG_##level,
enum { HS_LOG_LEVELS(HS_LOG_ENUM) HS_LOG_COUNT };
#undef HS_LOG_ENUM
extern const char *const hs_log_level_name[HS_LOG_COUNT];
int hs_parse_log_level(const char *s);
void hs_log_str(int level, const char *msg);
/* hs_log_user reports a user error (a bad HYBRIDSYNC_* value): one line on
 * stderr at every log level, off included (the stats file and
 * hs_last_error carry it too). */
void hs_log_user(const char *msg);

#endif
