// blocksync.so: CUDA's own blocking-sync mode for unmodified programs.
//
//   gcc -shared -fPIC -O2 -o blocksync.so blocksync.c -ldl
//   LD_PRELOAD=./blocksync.so ./app
//
// Its constructor sets CU_CTX_SCHED_BLOCKING_SYNC on device 0's primary
// context before the program creates it: the same as the program calling
// cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) first thing. No CUDA
// headers: the three driver entry points are declared here. On any failure
// it prints one line to stderr and leaves the program alone.
#include <dlfcn.h>
#include <stdio.h>

typedef int CUresult;
typedef int CUdevice;
#define CU_CTX_SCHED_BLOCKING_SYNC 0x04

__attribute__((constructor)) static void blocksync_init(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "blocksync: dlopen libcuda.so.1: %s\n", dlerror());
		return;
	}
	CUresult (*cuInit)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
	CUresult (*cuDeviceGet)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
	CUresult (*setFlags)(CUdevice, unsigned) = (CUresult(*)(CUdevice, unsigned))dlsym(h, "cuDevicePrimaryCtxSetFlags_v2");
	if (!setFlags)
		setFlags = (CUresult(*)(CUdevice, unsigned))dlsym(h, "cuDevicePrimaryCtxSetFlags");
	if (!cuInit || !cuDeviceGet || !setFlags) {
		fprintf(stderr, "blocksync: libcuda.so.1 lacks cuInit/cuDeviceGet/cuDevicePrimaryCtxSetFlags\n");
		return;
	}
	CUdevice dev;
	CUresult r = cuInit(0);
	if (r == 0)
		r = cuDeviceGet(&dev, 0);
	if (r == 0)
		r = setFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC);
	if (r != 0)
		fprintf(stderr, "blocksync: could not set CU_CTX_SCHED_BLOCKING_SYNC (CUresult %d)\n", r);
}
