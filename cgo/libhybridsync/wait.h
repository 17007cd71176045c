/* Shared by the C API and the interposer. */
#ifndef HS_WAIT_H
#define HS_WAIT_H
#include "core.h"
/* hs_wait runs the configured policy on w (initialising on first use) and
 * returns the CUresult of the completed wait. */
int hs_wait(struct hs_wait *w);
#endif
