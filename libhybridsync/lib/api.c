/* The public C API (include/hybridsync.h): the hs_* entry points, and
 * nothing else. Each checks its arguments and the process state, then
 * makes one call down: a wait into the wait runner (wait.h), the rest into
 * the library's life (life.h), the launch registry (core.h) or Go. The
 * layers below, in order: wait.c (the wait runner, with the thread's plan);
 * deleg.c, schedstat.c, stats.c and life.c; Go (main.go, the hybridsync
 * policy); the C core (libhybridsync/hscore: CUDA, the launch registry). */
#include <stdio.h>

#include "_cgo_export.h"
#include "core.h"
#include "hybridsync.h"
#include "life.h"
#include "wait.h"

int hs_init(const struct hs_config *cfg)
{
	if (hs_in_forked_child())
		return HS_ERR_STATE;
	if (cfg && cfg->struct_size < sizeof(struct hs_config)) {
		char msg[160];
		snprintf(msg, sizeof msg, "hs_config.struct_size %zu: want sizeof(struct hs_config) = %zu", cfg->struct_size,
			 sizeof(struct hs_config));
		hs_lib_set_error(msg);
		return HS_ERR_INVAL;
	}
	return hs_lib_init(cfg);
}

hs_kernel_t hs_kernel(const char *name)
{
	if (name == NULL || *name == 0 || hs_in_forked_child())
		return 0;
	return hsgo_kernel((char *)name);
}

void hs_launch_mark(hs_stream_t stream, hs_kernel_t kernel) { hs_reg_launch(stream, kernel, hs_now()); }

int hs_sync(hs_event_t event, hs_kernel_t kernel) { return hs_wait(HS_WAIT_EVENT, event, kernel, 0); }

int hs_stream_sync(hs_stream_t stream, hs_kernel_t kernel) { return hs_wait(HS_WAIT_STREAM, stream, kernel, 0); }

long hs_stats_json(char *buf, size_t len)
{
	if (buf == NULL && len > 0)
		return HS_ERR_INVAL;
	if (hs_in_forked_child() || atomic_load(&hs_lib_state) != HS_LIB_READY)
		return HS_ERR_STATE;
	long n = hsgo_stats_json(buf, len);
	return n == -4 ? HS_ERR_STATE : n;
}

int hs_shutdown(void)
{
	if (hs_in_forked_child())
		return HS_ERR_STATE;
	return hs_lib_shutdown();
}

const char *hs_last_error(void) { return hs_lib_error(); }

const char *hs_strerror(int code)
{
	switch (code) {
	case HS_OK:
		return "success";
	case HS_ERR_INVAL:
		return "invalid argument";
	case HS_ERR_NO_CUDA:
		return "CUDA driver not available";
	case HS_ERR_CONFIG:
		return "bad configuration";
	case HS_ERR_STATE:
		return "library not initialised, shut down, or in a forked child";
	}
	return "unknown hybridsync status";
}
