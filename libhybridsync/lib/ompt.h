/* LLVM/Intel libomp's blocktime, followed while the program runs through
 * the OpenMP tools interface (ompt.c; the decision:
 * hybridsync/openmp/ompfollow.go). A leaf: the runtime's own functions,
 * found with the core's hs_real_dlsym. */
#ifndef HS_OMPT_H
#define HS_OMPT_H

#pragma GCC visibility push(hidden)

/* hs_ompt_ready says whether libomp started the library as its tool and
 * its blocktime calls were found: the blocktime can be followed. */
int hs_ompt_ready(void);

/* hs_ompt_runtime copies the runtime's version string (len bytes with its
 * 0); empty before hs_ompt_ready. */
void hs_ompt_runtime(char *buf, unsigned long len);

/* hs_ompt_want sets the blocktime (ms) each thread that forks parallel
 * regions sets at its next one; -1: the blocktime libomp started with. */
void hs_ompt_want(int ms);

/* hs_ompt_blocktime is the blocktime (ms) last asked for, -1 before any. */
int hs_ompt_blocktime(void);

#pragma GCC visibility pop
#endif
