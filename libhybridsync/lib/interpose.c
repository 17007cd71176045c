//go:build !hs_nointerpose

/* Transparent mode: replacements for CUDA's waits, and observers of its
 * launches, for programs run under LD_PRELOAD=libhybridsync.so.
 *
 * Every replacement here is named in HS_CUDA_SYMBOLS (cuda_abi.h), and one
 * table generated from that list serves all three ways a program reaches
 * CUDA, as HAMi-core's does (where hand-kept lists drifted apart and held
 * duplicates): direct linking (these functions are exported
 * under CUDA's names), dlsym (replaced below), and cuGetProcAddress (how
 * cudart, static by default in nvcc builds, finds the driver). A function
 * is handed out in place of CUDA's only when the pointer CUDA gave is the
 * exact one resolved at init, so a newer ABI of the same name, or a
 * library we do not know, passes through untouched.
 *
 * A replacement that cannot run the policy (not interposing, re-entered
 * from inside the library, a forked child, no driver) calls the real
 * function: the program keeps working, only without the primitive.
 *
 * Left out of the static archive (built with -tags hs_nointerpose): a
 * program that links libhybridsync.a links it explicitly, and these CUDA
 * names would collide with libcudart_static's.
 *
 * An entry point, as api.c is: a hook calls down into the wait runner
 * (wait.h) for a wait, and into the C core (core.h: the launch registry,
 * the real functions) for the rest; nothing below calls back into it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "hybridsync.h"
#include "wait.h"

/* The hook table, from the one symbol list. */
#define HOOK_0(name) NULL
#define HOOK_1(name) (void *)&name
#define HS_HOOK(api, name, hooked, observe, ret, params, args) HOOK_##hooked(name),
static void *const hook[HS_SYM_COUNT] = {HS_CUDA_SYMBOLS(HS_HOOK)};
#undef HS_HOOK
_Static_assert(sizeof hook / sizeof hook[0] == HS_SYM_COUNT, "hook table out of step with the symbol list");

/* Which hooks run: a set of HS_HOOK_* (hybridsync.h); -1 until decided. */
static atomic_int interposing = -1;

/* Interposing is on under LD_PRELOAD of this library, off when a program
 * merely links it (its own CUDA calls stay its own), and HYBRIDSYNC_INTERPOSE
 * decides either way. Its value is read as hybridsync.ParseConfig reads it,
 * blanks around it ignored; one other than 0 or 1 is a configuration error
 * there, which keeps the library from starting. */
__attribute__((constructor)) static void decide(void)
{
	static const char blanks[] = " \t\n\v\f\r";
	const char *v = getenv("HYBRIDSYNC_INTERPOSE");
	if (v)
		v += strspn(v, blanks);
	int on;
	if (v && *v)
		on = !(v[0] == '0' && v[1 + strspn(v + 1, blanks)] == 0);
	else {
		const char *pre = getenv("LD_PRELOAD");
		on = pre && strstr(pre, "hybridsync") != NULL;
	}
	atomic_store(&interposing, on ? HS_HOOK_ALL : 0);
}

/* hs_interpose sets which hooks run from now on (HS_HOOK_* in hybridsync.h,
 * which says why it exists; 0: every CUDA call goes straight through) and
 * returns the previous set. Used by experiments/apps/diag/hook_cost.py and
 * the suite's in-process arms. Hooks turned off keep their
 * place in the program's call path, so what is measured is their work.
 * Switching the waits off pauses the calling thread's epoch, and switching
 * them on resumes it (hs_epoch_pause): the caller is the thread that waits
 * (experiments/apps/inproc.py). */
int hs_interpose(int hooks)
{
	int prev = atomic_exchange(&interposing, hooks & HS_HOOK_ALL);
	if (prev >= 0 && (prev & HS_HOOK_WAIT) != (hooks & HS_HOOK_WAIT))
		hs_epoch_pause(!(hooks & HS_HOOK_WAIT));
	return prev;
}

static int hooks_on(int which) { return atomic_load_explicit(&interposing, memory_order_relaxed) & which; }
static int interpose_on(void) { return atomic_load_explicit(&interposing, memory_order_relaxed) > 0; }

/* Set while the library itself calls CUDA (cudart calling back into the
 * driver replacements, our own waits): those calls go straight through. */
/* initial-exec: read on every launch, so no __tls_get_addr call; the
 * library is loaded at start (LD_PRELOAD or linked), where static TLS is
 * available. */
static __thread int in_hook __attribute__((tls_model("initial-exec")));

static int bypass_hook(int which) { return in_hook || !hooks_on(which) || hs_in_forked_child(); }
static int wait_bypassed(void) { return bypass_hook(HS_HOOK_WAIT); }
static int launch_bypassed(void) { return hs_unobserved || bypass_hook(HS_HOOK_OBSERVE); }

/* hook_for returns our replacement for a CUDA driver function pointer, or p
 * itself when it is not one we resolved. */
static void *hook_for(void *p)
{
	if (p == NULL || !interpose_on())
		return p;
	for (int i = 0; i < HS_SYM_COUNT; i++)
		if (hook[i] && !hs_sym_runtime[i] && (p == hs_real[i] || p == hs_alt[i]))
			return hook[i];
	return p;
}

/* ---- dlsym ---- */

static int in_cuda_driver(void *p)
{
	Dl_info di;
	if (!dladdr(p, &di) || di.dli_fname == NULL)
		return 0;
	const char *base = strrchr(di.dli_fname, '/');
	base = base ? base + 1 : di.dli_fname;
	return strncmp(base, "libcuda.so", 10) == 0;
}

void *dlsym(void *handle, const char *name)
{
	/* RTLD_NEXT means the object after the caller's: libc reads the
	 * caller from its return address, which must stay the caller's, not
	 * this library's (LLVM's libomp looks itself up that way and would
	 * find its own function again). A tail call, checked by
	 * TestPreloadLLVMOpenMP, leaves it; such lookups are not hooked. */
	if (handle == RTLD_NEXT)
		return hs_real_dlsym(handle, name);
	void *p = hs_real_dlsym(handle, name);
	if (p == NULL || name[0] != 'c' || name[1] != 'u' || !interpose_on())
		return p;
	for (int i = 0; i < HS_SYM_COUNT; i++) {
		if (hook[i] == NULL || strcmp(name, hs_sym_name[i]) != 0)
			continue;
		if (p == hook[i])
			return p;
		if (hs_sym_runtime[i]) {
			/* A runtime library's own function: remember it as the
			 * real one if we have none yet. */
			_Atomic(void *) *slot = (_Atomic(void *) *)&hs_real[i];
			void *none = NULL;
			atomic_compare_exchange_strong(slot, &none, p);
			return hook[i];
		}
		/* Never load the driver from here: dlsym runs inside other
		 * libraries' initialisers, the driver's own included. */
		if (hs_core_loaded())
			return hook_for(p);
		return in_cuda_driver(p) ? hook[i] : p;
	}
	return p;
}

/* ---- driver API ---- */

#define DRV_REAL(name, fail)                  \
	if (hs_core_load() != 0)               \
		return fail;                   \
	__typeof__(&name) real = HS_REAL(name); \
	if (real == NULL)                      \
		return HS_CUDA_ERROR_NOT_FOUND;

CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	DRV_REAL(cuGetProcAddress, HS_CUDA_ERROR_NOT_INITIALIZED)
	CUresult r = real(sym, pfn, ver, flags);
	if (r == 0 && pfn)
		*pfn = hook_for(*pfn);
	return r;
}

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status)
{
	DRV_REAL(cuGetProcAddress_v2, HS_CUDA_ERROR_NOT_INITIALIZED)
	CUresult r = real(sym, pfn, ver, flags, status);
	if (r == 0 && pfn)
		*pfn = hook_for(*pfn);
	return r;
}

static CUresult drv_wait(int kind, void *handle, int flags)
{
	in_hook = 1;
	CUresult r = hs_wait(kind, handle, 0, flags);
	in_hook = 0;
	return r;
}

CUresult cuEventSynchronize(CUevent e)
{
	DRV_REAL(cuEventSynchronize, HS_CUDA_ERROR_NOT_INITIALIZED)
	return wait_bypassed() ? real(e) : drv_wait(HS_WAIT_EVENT, e, HS_WAIT_ONCE);
}

CUresult cuStreamSynchronize(CUstream s)
{
	DRV_REAL(cuStreamSynchronize, HS_CUDA_ERROR_NOT_INITIALIZED)
	return wait_bypassed() ? real(s) : drv_wait(HS_WAIT_STREAM, s, 0);
}

CUresult cuStreamSynchronize_ptsz(CUstream s)
{
	DRV_REAL(cuStreamSynchronize_ptsz, HS_CUDA_ERROR_NOT_INITIALIZED)
	return wait_bypassed() ? real(s) : drv_wait(HS_WAIT_STREAM, s, HS_WAIT_PTSZ);
}

CUresult cuCtxSynchronize(void)
{
	DRV_REAL(cuCtxSynchronize, HS_CUDA_ERROR_NOT_INITIALIZED)
	return wait_bypassed() ? real() : drv_wait(HS_WAIT_CTX, NULL, 0);
}

static void note_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			CUstream s, int ptsz)
{
	if (s == NULL && ptsz)
		s = HS_CU_STREAM_PER_THREAD;
	hs_launch_observed(s, f, hs_shape_word(gx, gy), hs_shape_word(gz, bx), hs_shape_word(by, bz));
}

/* The launch and record hooks, generated from the symbol list: each
 * HS_TWINS entry with an observer gives a pair, the plain name and its
 * _ptsz twin (pt 1: stream 0 is the calling thread's per-thread default
 * stream), and OBSERVE_<observer> says what a successful call tells.
 * A hook bypassed (cudart's own driver launch under our cudaLaunchKernel,
 * or the hooks off) returns the real call at once, a jump with the
 * arguments in place; only an observed launch saves them across the call.
 * What the path costs: docs/BENCHMARKS.md, "What the library's parts
 * cost"; other shapes of it: docs/tried.md, "Launch-path variants". */
#define OBSERVE_LAUNCH(pt) note_launch(f, gx, gy, gz, bx, by, bz, s, pt)
#define OBSERVE_LAUNCH_EX(pt)                                                                                        \
	if (c)                                                                                                       \
		note_launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->hStream, \
			    pt)
#define OBSERVE_RECORD(pt) hs_reg_record(e, (pt) && s == NULL ? HS_CU_STREAM_PER_THREAD : s)
#define OBSERVING_HOOK(name, observe, pt, ret, params, args) \
	ret name params                                      \
	{                                                    \
		DRV_REAL(name, HS_CUDA_ERROR_NOT_INITIALIZED) \
		if (launch_bypassed())                       \
			return real args;                    \
		CUresult r = real args;                      \
		if (r == 0) {                                \
			OBSERVE_##observe(pt);               \
		}                                            \
		return r;                                    \
	}
#define OBSERVER_0(name, observe, ret, params, args)
#define OBSERVER_LAUNCH OBSERVER_PAIR
#define OBSERVER_LAUNCH_EX OBSERVER_PAIR
#define OBSERVER_RECORD OBSERVER_PAIR
#define OBSERVER_PAIR(name, observe, ret, params, args)     \
	OBSERVING_HOOK(name, observe, 0, ret, params, args) \
	OBSERVING_HOOK(name##_ptsz, observe, 1, ret, params, args)
#define HS_OBSERVER(api, name, hooked, observe, ret, params, args) OBSERVER_##observe(name, observe, ret, params, args)
HS_CUDA_SYMBOLS(HS_OBSERVER)
#undef HS_OBSERVER

/* ---- runtime API (dynamically linked cudart) ---- */

#define RT_REAL(name)                                                            \
	__typeof__(&name) real = (__typeof__(&name))hs_core_runtime(HS_SYM_##name); \
	if (real == NULL)                                                        \
		return HS_CUDA_ERROR_NOT_INITIALIZED;

/* rt_begin starts a runtime wait through the driver (runtime handles are
 * driver handles): it runs the policy, after which the real runtime call
 * returns for the completed work with its exact cudaError_t and its error
 * bookkeeping, without a wait; or it leaves the wait to CUDA, and the real
 * runtime call is the wait itself, checked by hs_wait_end after it. Either
 * way the library's own CUDA calls, from here until the real call returns,
 * go straight through. */
static void rt_begin(struct hs_cuda_wait *c, int kind, void *handle, int flags)
{
	in_hook = 1;
	hs_wait_begin(c, kind, handle, flags);
}

static void rt_end(struct hs_cuda_wait *c)
{
	in_hook = 0;
	hs_wait_end(c);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	RT_REAL(cudaEventSynchronize)
	if (wait_bypassed())
		return real(e);
	struct hs_cuda_wait c;
	rt_begin(&c, HS_WAIT_EVENT, e, HS_WAIT_ONCE);
	cudaError_t r = real(e);
	rt_end(&c);
	return r;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	RT_REAL(cudaStreamSynchronize)
	if (wait_bypassed())
		return real(s);
	struct hs_cuda_wait c;
	rt_begin(&c, HS_WAIT_STREAM, s, 0);
	cudaError_t r = real(s);
	rt_end(&c);
	return r;
}

cudaError_t cudaDeviceSynchronize(void)
{
	RT_REAL(cudaDeviceSynchronize)
	if (wait_bypassed())
		return real();
	struct hs_cuda_wait c;
	rt_begin(&c, HS_WAIT_CTX, NULL, 0);
	cudaError_t r = real();
	rt_end(&c);
	return r;
}

cudaError_t cudaLaunchKernel(const void *f, hs_dim3 g, hs_dim3 b, void **args, size_t shm, cudaStream_t s)
{
	RT_REAL(cudaLaunchKernel)
	if (launch_bypassed())
		return real(f, g, b, args, shm, s);
	in_hook = 1; /* the driver launch underneath is the same launch */
	cudaError_t r = real(f, g, b, args, shm, s);
	in_hook = 0;
	if (r == 0)
		hs_launch_observed(s, f, hs_shape_word(g.x, g.y), hs_shape_word(g.z, b.x), hs_shape_word(b.y, b.z));
	return r;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	RT_REAL(cudaEventRecord)
	if (launch_bypassed())
		return real(e, s);
	in_hook = 1;
	cudaError_t r = real(e, s);
	in_hook = 0;
	if (r == 0)
		hs_reg_record(e, s);
	return r;
}
