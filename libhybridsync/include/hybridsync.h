/* hybridsync.h: the polling-then-blocking CPU-GPU synchronization primitive
 * for CUDA programs (libhybridsync).
 *
 * Use it in place of cudaEventSynchronize / cudaStreamSynchronize: each wait
 * spins, sleeps or blocks, whichever is cheapest given how long the kernel
 * is expected to run (learned per kernel), how much of the thread's CPU
 * time slice is left, and how late a blocked thread wakes on this machine.
 * Or run an unmodified program with LD_PRELOAD=libhybridsync.so.
 *
 * Building needs no CUDA toolkit: the CUDA driver is loaded at run time
 * (HYBRIDSYNC_CUDA_LIB or libcuda.so.1). The handle types below are the
 * CUDA ones (cudaEvent_t is struct CUevent_st *), so CUDA handles pass
 * without casts.
 *
 * Configuration, read by hs_init (or the first call that needs it):
 *   HYBRIDSYNC_MODE        hybrid (default), paper, spin, yield, block, cuda-auto
 *   HYBRIDSYNC_MAX_SPIN_US longest single spin in µs, or "inf" (default 10000)
 *   HYBRIDSYNC_HINTS       path of the host agent's hint page (remaining time
 *                          slice, contention): /dev/shm/vgpu-probe-hints in
 *                          a guest; unset or unusable: estimated from spins
 *   HYBRIDSYNC_STATS       file the stats JSON is written to at exit; "%p" is
 *                          replaced by the process id
 *   HYBRIDSYNC_LOG         off (default), error, warn, info, debug: what goes
 *                          to stderr (off: nothing but a bad value of a
 *                          HYBRIDSYNC_* variable, which is said at every
 *                          level). Nothing is ever written to stdout.
 *   HYBRIDSYNC_CUDA_LIB    path of the CUDA driver library
 *   HYBRIDSYNC_CUDART_LIB  path of the CUDA runtime library, used when the
 *                          program has none loaded
 *   HYBRIDSYNC_INTERPOSE   1/0: replace the CUDA waits of the whole program
 *                          (default: 1 only when loaded through LD_PRELOAD)
 *   HYBRIDSYNC_OPENMP      auto (default), bounded, default, live: the OpenMP
 *                          wait settings hybridsync-run gives a program (see
 *                          hs_openmp_env); default also keeps the library
 *                          from adapting libomp's blocktime live; live runs
 *                          the program's OpenMP on LLVM's libomp, whose
 *                          blocktime the library adapts live
 *   HYBRIDSYNC_LIBOMP      with HYBRIDSYNC_OPENMP=live: the libomp to
 *                          preload (default: the system's libomp.so.5)
 *   HYBRIDSYNC_RUN_SET     set by hybridsync-run (the launcher): NAME=VALUE of
 *                          each OpenMP variable it set, which the stats'
 *                          "openmp" object reports; not for users to set
 *
 * Every HYBRIDSYNC_* variable is checked as the library loads, whether or
 * not the program calls CUDA or the library: a bad value, or a name that
 * is none of the above, is said once on stderr, one line each, at every
 * log level.
 *
 * Thread safety: every function may be called from any number of threads at
 * once, except where noted. Fork: a child process that does not use CUDA is
 * unaffected; in a child, the waits are plain CUDA calls and the other
 * functions return HS_ERR_STATE. Signals: no signal handler is installed
 * for the program's signals; interrupted sleeps resume.
 */
#ifndef HYBRIDSYNC_H
#define HYBRIDSYNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HYBRIDSYNC_VERSION_MAJOR 0
#define HYBRIDSYNC_VERSION_MINOR 1

/* The CUDA handle types (cudaEvent_t and CUevent are both these). */
typedef struct CUevent_st *hs_event_t;
typedef struct CUstream_st *hs_stream_t;
/* A kernel's id in the timing dictionary; 0 means "unknown kernel". */
typedef uint64_t hs_kernel_t;

/* Library status codes (negative; CUDA results are never negative). */
enum {
	HS_OK = 0,
	HS_ERR_INVAL = -1,   /* bad argument */
	HS_ERR_NO_CUDA = -2, /* the CUDA driver could not be loaded */
	HS_ERR_CONFIG = -3,  /* bad configuration (environment or hs_config) */
	HS_ERR_STATE = -4    /* not initialised, shut down, or in a forked child */
};

/* Explicit configuration. Zero/NULL fields take the environment's value or
 * the default. Set struct_size to sizeof(struct hs_config). */
struct hs_config {
	size_t struct_size;
	const char *mode;      /* as HYBRIDSYNC_MODE */
	double max_spin_us;    /* as HYBRIDSYNC_MAX_SPIN_US; 0: default, < 0: infinite */
	const char *stats_path;/* as HYBRIDSYNC_STATS */
	const char *log_level; /* as HYBRIDSYNC_LOG */
};

/* hs_init loads the CUDA driver and configures the library from cfg (NULL:
 * the environment only); the configuration is checked first, so a bad one
 * is HS_ERR_CONFIG even where there is no driver. Optional: the first call that needs it initialises
 * from the environment. Calling it again reconfigures and forgets what was
 * learned. Returns HS_OK, HS_ERR_NO_CUDA, HS_ERR_CONFIG, HS_ERR_INVAL (bad
 * struct_size) or HS_ERR_STATE (in a forked child); hs_last_error() says
 * why. */
int hs_init(const struct hs_config *cfg);

/* hs_kernel returns the id of the kernel called name, registering it on
 * first use. The same name gives the same id in every process. Returns 0
 * (unknown kernel) for NULL or "", and in a forked child. */
hs_kernel_t hs_kernel(const char *name);

/* hs_launch_mark records that kernel was just launched on stream: its
 * timing is learned from this moment to its completion. Call it right
 * after the launch. Never fails; cheap (no locks, no CUDA call). */
void hs_launch_mark(hs_stream_t stream, hs_kernel_t kernel);

/* hs_sync waits for event, recorded after kernel (0 if unknown), and
 * returns what cuEventSynchronize returns for it: 0 once it completed, or
 * the CUDA error (the same numbers as cudaEventSynchronize's: 400 for an
 * invalid handle, 700-719 for a failed kernel, ...). Never returns before
 * the event completed. Without a loadable driver it returns 3
 * (CUDA_ERROR_NOT_INITIALIZED); after hs_shutdown and in a forked child it
 * is cuEventSynchronize itself. */
int hs_sync(hs_event_t event, hs_kernel_t kernel);

/* hs_stream_sync waits for all work in stream (0: the legacy default
 * stream) like cuStreamSynchronize, with the same results as hs_sync. */
int hs_stream_sync(hs_stream_t stream, hs_kernel_t kernel);

/* hs_stats_json writes the stats (counts, time spun/slept/blocked, learned
 * kernel timings, wake-up costs, the OpenMP runtime loaded and its wait
 * settings) as NUL-terminated JSON into buf, truncated
 * to len-1 bytes, and returns the full length without the NUL, like
 * snprintf (buf may be NULL when len is 0). Returns HS_ERR_STATE before
 * initialisation and in a forked child, HS_ERR_INVAL for NULL buf with
 * len > 0. */
long hs_stats_json(char *buf, size_t len);

/* hs_shutdown writes the stats file (if configured) and stops the
 * primitive: later waits are plain CUDA calls until hs_init. Returns HS_OK,
 * or HS_ERR_STATE if not initialised. */
int hs_shutdown(void);

/* hs_openmp_env writes into env (n bytes, NUL-terminated) the OpenMP wait
 * settings for a program about to start on the CPUs the calling process
 * may use, as blank-separated NAME=VALUE words, which the launcher sets
 * as they are. By default (HYBRIDSYNC_OPENMP=auto) GOMP_SPINCOUNT=299917,
 * a marker next to libgomp's default spin that the library finds and
 * follows while the program runs, unless OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT is set. =bounded gives the bounded spin (GOMP_SPINCOUNT,
 * KMP_BLOCKTIME), =default nothing; =live measures the CPUs by spinning a
 * thread on each for 0.1 s (run delay, or steal in a VM), gives the
 * bounded spin where another thread competes for them, and adds
 * LD_PRELOAD=PATH, LLVM's libomp for the launcher to preload after the
 * library (it provides GNU libgomp's entry points too). A variable the
 * user set is never in env.
 * why gets what was measured, or why it failed. Returns 0, or -1.
 * hybridsync-run asks it (through hybridsync-openmp) before it starts a
 * program, since GNU libgomp reads its setting before any preloaded
 * library runs. Needs no CUDA and no hs_init. */
int hs_openmp_env(char *env, size_t n, char *why, size_t why_n);

/* hs_last_error describes the last failed hs_init (or implicit
 * initialisation); "" if none. The string stays valid until the next
 * initialisation. */
const char *hs_last_error(void);

/* hs_strerror names an HS_* status code. */
const char *hs_strerror(int code);

/* hs_interpose's hook sets. hs_interpose(int hooks), exported by
 * libhybridsync.so, is no part of this API: it exists for measuring,
 * within one process, what the interposer's hooks cost and how the library
 * compares with CUDA's own modes (experiments/apps), where separate
 * processes vary more than the difference looked for. It sets which hooks
 * run from then on (0: every CUDA call goes straight through) and returns
 * the previous set; a program finds it with dlsym(RTLD_DEFAULT,
 * "hs_interpose"). */
#define HS_HOOK_OBSERVE 1 /* kernel launches and event records */
#define HS_HOOK_WAIT 2    /* the waits */
#define HS_HOOK_ALL (HS_HOOK_OBSERVE | HS_HOOK_WAIT)

#ifdef __cplusplus
}
#endif
#endif
