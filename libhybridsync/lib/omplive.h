/* libomp's blocktime, set on the calling thread as Go decided
 * (omplive.c; the decision: hybridsync/openmp/blocktime.go). Called by the
 * wait runner (wait.c) around a thread's report, and by Go at
 * initialisation (main.go). A leaf above the C core: the OpenMP runtime's
 * own functions only, found with the core's hs_real_dlsym (libc's dlsym,
 * not the interposer's). */
#ifndef HS_OMPLIVE_H
#define HS_OMPLIVE_H

#pragma GCC visibility push(hidden)

/* hs_omp_live_resolve looks up libomp's kmp_set_blocktime,
 * kmp_get_blocktime and omp_get_level (dlsym(RTLD_DEFAULT)): 1 when all
 * three are there (LLVM's libomp, Intel's libiomp5; GNU libgomp has no
 * kmp_set_blocktime), else 0. */
int hs_omp_live_resolve(void);
/* hs_omp_live_set turns the adaptation on (1) or off (0), as Go decided
 * (openmp.BlocktimeLive). */
void hs_omp_live_set(int on);
/* hs_omp_blocktime returns the calling thread's blocktime (ms) as the
 * runner knows it, -1 where it cannot set it now: adaptation off, or
 * inside a parallel region (kmp_set_blocktime sets the calling thread's
 * team and the teams it forks later, so it is called between regions).
 * The thread's first call reads it from libomp (kmp_get_blocktime). */
int hs_omp_blocktime(void);
/* hs_omp_set_blocktime sets the calling thread's blocktime to ms, right
 * after hs_omp_blocktime said it can. */
void hs_omp_set_blocktime(int ms);

#pragma GCC visibility pop
#endif
