/* The calling thread's scheduler accounting (schedstat.c), read by the
 * wait runner once per check or report, never per wait.
 * A leaf: system calls only. */
#ifndef HS_SCHEDSTAT_H
#define HS_SCHEDSTAT_H
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* hs_run_delay reads the calling thread's run delay, the time it was
 * runnable but waiting for a CPU (ns), and how often it was scheduled in
 * (schedstat's second and third fields): 1, or 0 if unreadable. Three
 * system calls, a few µs. */
int hs_run_delay(int64_t *delay, int64_t *runs);
/* hs_thread_cpu is the calling thread's CPU time (ns), 0 if unreadable:
 * a system call. */
int64_t hs_thread_cpu(void);

#pragma GCC visibility pop
#endif
