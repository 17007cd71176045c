/* The C side's share of the stats (stats.c): counters the epoch engine
 * (wait.c) adds to and Go reads into the stats document, and the stats
 * file at exit, which Go writes (hsgo_write_stats, hsgo_write_unengaged:
 * one writer, main.go). */
#ifndef HS_STATS_H
#define HS_STATS_H
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* hs_count_quiet counts a report skipped while the thread's CPU stayed
 * free; hs_count_report one report into Go that took spent ns. */
void hs_count_quiet(void);
void hs_count_report(int64_t spent);
/* For Go: reports skipped while a thread's CPU stayed free; reports made,
 * their total and longest wall time (ns). */
unsigned long hs_quiet_checks(void);
unsigned long hs_reports(int64_t *ns, int64_t *max_ns);
/* hs_count_event_block counts an event wait of the policy arm that blocked
 * on a shadow event for ns; hs_event_blocks returns their number and total
 * ns, for Go. */
void hs_count_event_block(int64_t ns);
unsigned long hs_event_blocks(int64_t *ns);

#pragma GCC visibility pop
#endif
