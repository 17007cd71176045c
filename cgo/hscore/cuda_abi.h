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
 * from it (STYLE.md, HAMi-core): the symbol enum, the name table, the real
 * function table resolved at init and, in the interposer, the hook table
 * that dlsym, cuGetProcAddress and direct linking are all served from.
 *   X(api, name, hooked, ret, params, args)
 * api: DRV (libcuda.so.1) or RT (libcudart); hooked: 1 when the interposer
 * defines a replacement of that name. */
#define HS_CUDA_SYMBOLS(X)                                                                 \
	/* driver API: waits we replace */                                                    \
	X(DRV, cuEventSynchronize, 1, CUresult, (CUevent e), (e))                              \
	X(DRV, cuStreamSynchronize, 1, CUresult, (CUstream s), (s))                            \
	X(DRV, cuStreamSynchronize_ptsz, 1, CUresult, (CUstream s), (s))                       \
	X(DRV, cuCtxSynchronize, 1, CUresult, (void), ())                                      \
	/* driver API: launches and records we observe (kernel identity, launch time) */      \
	X(DRV, cuLaunchKernel, 1, CUresult,                                                    \
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,      \
	   unsigned bz, unsigned shm, CUstream s, void **params, void **extra),                \
	  (f, gx, gy, gz, bx, by, bz, shm, s, params, extra))                                  \
	X(DRV, cuLaunchKernel_ptsz, 1, CUresult,                                               \
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,      \
	   unsigned bz, unsigned shm, CUstream s, void **params, void **extra),                \
	  (f, gx, gy, gz, bx, by, bz, shm, s, params, extra))                                  \
	X(DRV, cuLaunchKernelEx, 1, CUresult, (const CUlaunchConfig *c, CUfunction f, void **params, void **extra), \
	  (c, f, params, extra))                                                                \
	X(DRV, cuLaunchKernelEx_ptsz, 1, CUresult,                                              \
	  (const CUlaunchConfig *c, CUfunction f, void **params, void **extra), (c, f, params, extra)) \
	X(DRV, cuEventRecord, 1, CUresult, (CUevent e, CUstream s), (e, s))                    \
	X(DRV, cuEventRecord_ptsz, 1, CUresult, (CUevent e, CUstream s), (e, s))               \
	X(DRV, cuEventRecordWithFlags, 1, CUresult, (CUevent e, CUstream s, unsigned f), (e, s, f)) \
	X(DRV, cuEventRecordWithFlags_ptsz, 1, CUresult, (CUevent e, CUstream s, unsigned f), (e, s, f)) \
	/* driver API: how static cudart finds the driver */                                  \
	X(DRV, cuGetProcAddress, 1, CUresult,                                                  \
	  (const char *sym, void **pfn, int ver, cuuint64_t flags), (sym, pfn, ver, flags))    \
	X(DRV, cuGetProcAddress_v2, 1, CUresult,                                               \
	  (const char *sym, void **pfn, int ver, cuuint64_t flags, int *status),               \
	  (sym, pfn, ver, flags, status))                                                      \
	/* driver API: used by the library itself, never replaced */                          \
	X(DRV, cuInit, 0, CUresult, (unsigned flags), (flags))                                 \
	X(DRV, cuEventQuery, 0, CUresult, (CUevent e), (e))                                    \
	X(DRV, cuEventCreate, 0, CUresult, (CUevent * e, unsigned flags), (e, flags))         \
	X(DRV, cuEventDestroy_v2, 0, CUresult, (CUevent e), (e))                               \
	X(DRV, cuStreamCreate, 0, CUresult, (CUstream * s, unsigned flags), (s, flags))       \
	X(DRV, cuStreamDestroy_v2, 0, CUresult, (CUstream s), (s))                             \
	X(DRV, cuStreamWaitEvent, 0, CUresult, (CUstream s, CUevent e, unsigned f), (s, e, f)) \
	X(DRV, cuStreamQuery, 0, CUresult, (CUstream s), (s))                                  \
	X(DRV, cuStreamQuery_ptsz, 0, CUresult, (CUstream s), (s))                             \
	X(DRV, cuCtxGetCurrent, 0, CUresult, (CUcontext * c), (c))                             \
	/* runtime API (dynamically linked cudart): waits we replace */                       \
	X(RT, cudaEventSynchronize, 1, cudaError_t, (cudaEvent_t e), (e))                      \
	X(RT, cudaStreamSynchronize, 1, cudaError_t, (cudaStream_t s), (s))                    \
	X(RT, cudaDeviceSynchronize, 1, cudaError_t, (void), ())                               \
	/* runtime API: launches and records we observe */                                    \
	X(RT, cudaLaunchKernel, 1, cudaError_t,                                                \
	  (const void *f, hs_dim3 g, hs_dim3 b, void **args, size_t shm, cudaStream_t s),      \
	  (f, g, b, args, shm, s))                                                             \
	X(RT, cudaEventRecord, 1, cudaError_t, (cudaEvent_t e, cudaStream_t s), (e, s))

#define HS_DECLARE_PROTO(api, name, hooked, ret, params, args) ret name params;
HS_CUDA_SYMBOLS(HS_DECLARE_PROTO)
#undef HS_DECLARE_PROTO

enum hs_sym {
#define HS_ENUM(api, name, hooked, ret, params, args) HS_SYM_##name,
	HS_CUDA_SYMBOLS(HS_ENUM)
#undef HS_ENUM
	HS_SYM_COUNT
};

#endif
