/* A stand-in for the CUDA runtime (libcudart) over the stand-in driver. It
 * reaches the driver the way the real cudart does: dlopen("libcuda.so.1"),
 * dlsym of cuGetProcAddress_v2, then cuGetProcAddress for every function.
 * Built as libcudart.so.13 (what PyTorch-style programs link) and compiled
 * into programs directly (what nvcc's default static cudart does). Runtime
 * handles are driver handles and the error numbers are the driver's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct {
	unsigned x, y, z;
} dim3;

#define D(ret, name, params) static ret(*p_##name) params;
D(int, cuEventCreate, (cudaEvent_t *, unsigned))
D(int, cuEventDestroy, (cudaEvent_t))
D(int, cuEventRecord, (cudaEvent_t, cudaStream_t))
D(int, cuEventQuery, (cudaEvent_t))
D(int, cuEventSynchronize, (cudaEvent_t))
D(int, cuStreamCreate, (cudaStream_t *, unsigned))
D(int, cuStreamQuery, (cudaStream_t))
D(int, cuStreamSynchronize, (cudaStream_t))
D(int, cuCtxSynchronize, (void))
D(int, cuLaunchKernel,
  (const void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, cudaStream_t, void **, void **))
#undef D

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_err;
static __thread int last_err;

static void init(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		init_err = 35; /* cudaErrorInsufficientDriver */
		return;
	}
	int (*gpa)(const char *, void **, int, uint64_t, int *) =
		(int (*)(const char *, void **, int, uint64_t, int *))dlsym(h, "cuGetProcAddress_v2");
	if (!gpa) {
		init_err = 35;
		return;
	}
#define G(name)                                                           \
	if (gpa(#name, (void **)&p_##name, 13000, 0, NULL) != 0 || !p_##name) \
		init_err = 3;
	G(cuEventCreate)
	G(cuEventDestroy)
	G(cuEventRecord)
	G(cuEventQuery)
	G(cuEventSynchronize)
	G(cuStreamCreate)
	G(cuStreamQuery)
	G(cuStreamSynchronize)
	G(cuCtxSynchronize)
	G(cuLaunchKernel)
#undef G
}

static int ready(void)
{
	pthread_once(&once, init);
	return init_err;
}

static cudaError_t ret(int r)
{
	if (r != 0 && r != 600)
		last_err = r;
	return r;
}

#define INIT                 \
	if (ready() != 0)    \
		return ret(init_err);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) { INIT return ret(p_cuEventCreate(e, flags)); }
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { INIT return ret(p_cuEventDestroy(e)); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { INIT return ret(p_cuEventRecord(e, s)); }
cudaError_t cudaEventQuery(cudaEvent_t e) { INIT return ret(p_cuEventQuery(e)); }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { INIT return ret(p_cuEventSynchronize(e)); }
cudaError_t cudaStreamCreate(cudaStream_t *s) { INIT return ret(p_cuStreamCreate(s, 0)); }
cudaError_t cudaStreamQuery(cudaStream_t s) { INIT return ret(p_cuStreamQuery(s)); }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { INIT return ret(p_cuStreamSynchronize(s)); }
cudaError_t cudaDeviceSynchronize(void) { INIT return ret(p_cuCtxSynchronize()); }
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shm, cudaStream_t s)
{
	INIT return ret(p_cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shm, s, args, NULL));
}
cudaError_t cudaGetLastError(void)
{
	int r = last_err;
	last_err = 0;
	return r;
}
