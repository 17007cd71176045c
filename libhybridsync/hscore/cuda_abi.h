/* CUDA types and prototypes, declared ABI-compatibly so that nothing here
 * needs the CUDA toolkit at build time. Handles are the same opaque struct
 * pointers cuda.h and cuda_runtime_api.h use, so an application's
 * cudaEvent_t / CUevent passes through without a cast. Only what the
 * library calls or interposes is declared. */
#ifndef HS_CUDA_ABI_H
#define HS_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int cudaError_t;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef uint64_t cuuint64_t;
typedef struct { unsigned int x, y, z; } hs_dim3;
/* cuLaunchKernelEx's configuration (cuda.h, CUDA 12+); read, never written. */
typedef struct CUlaunchConfig_st {
	unsigned gridDimX, gridDimY, gridDimZ;
	unsigned blockDimX, blockDimY, blockDimZ;
	unsigned sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned numAttrs;
} CUlaunchConfig;

#define HS_CUDA_SUCCESS 0
#define HS_CUDA_ERROR_NOT_INITIALIZED 3
#define HS_CUDA_ERROR_INVALID_CONTEXT 201
#define HS_CUDA_ERROR_NOT_FOUND 500
#define HS_CUDA_ERROR_NOT_READY 600

#define HS_CU_EVENT_BLOCKING_SYNC 0x1
#define HS_CU_EVENT_DISABLE_TIMING 0x2
#define HS_CU_STREAM_NON_BLOCKING 0x1
#define HS_CU_STREAM_LEGACY ((CUstream)0x1)
#define HS_CU_STREAM_PER_THREAD ((CUstream)0x2)
#define HS_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2

/* The CUDA functions the library knows, one list for everything generated
 * from it (as in HAMi-core, whose single hook list replaced ~150 hand-kept
 * entries with duplicates): the symbol enum, the name table, the real
 * function table resolved at init and, in the interposer, the hook table
 * that dlsym, cuGetProcAddress and direct linking are all served from, and
 * the launch and record hooks themselves.
 *   X(api, name, hooked, observe, ret, params, args)
 * api: DRV (libcuda.so.1) or RT (libcudart); hooked: 1 when the interposer
 * defines a replacement of that name; observe: 0, or how the interposer's
 * generated hook observes a successful call (LAUNCH, LAUNCH_EX, RECORD),
 * for both names of a pair.
 * HS_TWINS lists such a pair: the plain name, whose stream 0 is the legacy
 * stream, and its _ptsz twin, whose stream 0 is the calling thread's
 * per-thread default stream; the twin carries observe 0, the pair being
 * generated once, from the plain entry. */
#define HS_TWINS(X, api, name, hooked, observe, ret, params, args) \
	X(api, name, hooked, observe, ret, params, args) X(api, name##_ptsz, hooked, 0, ret, params, args)
#define HS_CUDA_SYMBOLS(X)                                                                 \
	/* driver API: waits we replace */                                                    \
	X(DRV, cuEventSynchronize, 1, 0, CUresult, (CUevent e), (e))                           \
	HS_TWINS(X, DRV, cuStreamSynchronize, 1, 0, CUresult, (CUstream s), (s))               \
	X(DRV, cuCtxSynchronize, 1, 0, CUresult, (void), ())                                   \
	/* driver API: launches and records we observe (kernel identity, launch time) */      \
	HS_TWINS(X, DRV, cuLaunchKernel, 1, LAUNCH, CUresult,                                  \
		 (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
		  unsigned bz, unsigned shm, CUstream s, void **params, void **extra),           \
		 (f, gx, gy, gz, bx, by, bz, shm, s, params, extra))                             \
	HS_TWINS(X, DRV, cuLaunchKernelEx, 1, LAUNCH_EX, CUresult,                             \
		 (const CUlaunchConfig *c, CUfunction f, void **params, void **extra), (c, f, params, extra)) \
	HS_TWINS(X, DRV, cuEventRecord, 1, RECORD, CUresult, (CUevent e, CUstream s), (e, s))  \
	HS_TWINS(X, DRV, cuEventRecordWithFlags, 1, RECORD, CUresult, (CUevent e, CUstream s, unsigned f), \
		 (e, s, f))                                                                     \
	/* driver API: how static cudart finds the driver */                                  \
	X(DRV, cuGetProcAddress, 1, 0, CUresult,                                               \
	  (const char *sym, void **pfn, int ver, cuuint64_t flags), (sym, pfn, ver, flags))    \
	X(DRV, cuGetProcAddress_v2, 1, 0, CUresult,                                            \
	  (const char *sym, void **pfn, int ver, cuuint64_t flags, int *status),               \
	  (sym, pfn, ver, flags, status))                                                      \
	/* driver API: used by the library itself, never replaced */                          \
	X(DRV, cuInit, 0, 0, CUresult, (unsigned flags), (flags))                              \
	X(DRV, cuEventQuery, 0, 0, CUresult, (CUevent e), (e))                                 \
	X(DRV, cuEventCreate, 0, 0, CUresult, (CUevent * e, unsigned flags), (e, flags))      \
	X(DRV, cuEventDestroy_v2, 0, 0, CUresult, (CUevent e), (e))                            \
	X(DRV, cuStreamCreate, 0, 0, CUresult, (CUstream * s, unsigned flags), (s, flags))    \
	X(DRV, cuStreamDestroy_v2, 0, 0, CUresult, (CUstream s), (s))                          \
	X(DRV, cuStreamWaitEvent, 0, 0, CUresult, (CUstream s, CUevent e, unsigned f), (s, e, f)) \
	HS_TWINS(X, DRV, cuStreamQuery, 0, 0, CUresult, (CUstream s), (s))                     \
	X(DRV, cuCtxGetCurrent, 0, 0, CUresult, (CUcontext * c), (c))                          \
	/* runtime API (dynamically linked cudart): waits we replace */                       \
	X(RT, cudaEventSynchronize, 1, 0, cudaError_t, (cudaEvent_t e), (e))                   \
	X(RT, cudaStreamSynchronize, 1, 0, cudaError_t, (cudaStream_t s), (s))                 \
	X(RT, cudaDeviceSynchronize, 1, 0, cudaError_t, (void), ())                            \
	/* runtime API: launches and records we observe */                                    \
	X(RT, cudaLaunchKernel, 1, 0, cudaError_t,                                             \
	  (const void *f, hs_dim3 g, hs_dim3 b, void **args, size_t shm, cudaStream_t s),      \
	  (f, g, b, args, shm, s))                                                             \
	X(RT, cudaEventRecord, 1, 0, cudaError_t, (cudaEvent_t e, cudaStream_t s), (e, s))

#define HS_DECLARE_PROTO(api, name, hooked, observe, ret, params, args) ret name params;
HS_CUDA_SYMBOLS(HS_DECLARE_PROTO)
#undef HS_DECLARE_PROTO

enum hs_sym {
#define HS_ENUM(api, name, hooked, observe, ret, params, args) HS_SYM_##name,
	HS_CUDA_SYMBOLS(HS_ENUM)
#undef HS_ENUM
	HS_SYM_COUNT
};

#endif
