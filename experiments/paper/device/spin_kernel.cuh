// The benchmark's kernel: busy-waits on the GPU's nanosecond timer for
// exactly ns, so a kernel's duration does not depend on the GPU model. When
// done is not NULL it is set at the end (host-mapped: proves completion).
#pragma once
#include <stdint.h>
__device__ __forceinline__ void spin_kernel_body(uint64_t ns, volatile int *done)
{
	uint64_t start, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - start < ns);
	if (done) {
		__threadfence_system();
		*done = 1;
	}
}

__global__ void spin_kernel(uint64_t ns, volatile int *done) { spin_kernel_body(ns, done); }
