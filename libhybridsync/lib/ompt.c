/* libomp's blocktime, followed while the program runs: see ompt.h.
 *
 * libomp's kmp_set_blocktime sets the calling thread's team and the teams
 * it forks later, so it must be called by the thread that forks, between
 * regions. The OpenMP tools interface (OMPT, OpenMP 5.0) gives exactly
 * that moment: libomp calls a tool's parallel-begin callback on the
 * forking thread before each region. libomp looks the tool up as the
 * symbol ompt_start_tool as it starts; this library, preloaded by
 * hybridsync-run, defines it, and declines (NULL) outside the launcher's
 * following mode, where libomp then looks at OMP_TOOL_LIBRARIES as usual.
 * GNU libgomp has no tools interface; its spin is followed in gompspin.c. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "ompt.h"

/* The few OMPT types used, as OpenMP 5.0's omp-tools.h defines them (the
 * header comes with the compilers' OpenMP, not with every build machine). */
typedef void (*ompt_interface_fn_t)(void);
typedef ompt_interface_fn_t (*ompt_function_lookup_t)(const char *name);
typedef union ompt_data_t {
	uint64_t value;
	void *ptr;
} ompt_data_t;
typedef void (*ompt_callback_t)(void);
typedef int (*ompt_set_callback_t)(int event, ompt_callback_t callback);
typedef int (*ompt_initialize_t)(ompt_function_lookup_t lookup, int initial_device_num, ompt_data_t *tool_data);
typedef void (*ompt_finalize_t)(ompt_data_t *tool_data);
typedef struct ompt_start_tool_result_t {
	ompt_initialize_t initialize;
	ompt_finalize_t finalize;
	ompt_data_t tool_data;
} ompt_start_tool_result_t;
enum { hs_ompt_callback_parallel_begin = 3, hs_ompt_set_always = 5 };

static void (*set_bt)(int);
static int (*get_bt)(void);
static int (*get_level)(void);
static int ready, started_with = -1, want = -1;
static char runtime[128];

/* The blocktime this thread last set, -2 before it set one. */
static __thread int set_here __attribute__((tls_model("initial-exec"))) = -2;

/* parallel_begin runs on the forking thread before each region (its
 * arguments, the region's data, are not needed). An atomic load per
 * region where nothing changed. */
static void parallel_begin(void)
{
	int w = __atomic_load_n(&want, __ATOMIC_RELAXED);
	if (w < 0 || w == set_here || get_level() != 0)
		return;
	set_bt(w);
	set_here = w;
}

static int initialize(ompt_function_lookup_t lookup, int initial_device_num, ompt_data_t *tool_data)
{
	(void)initial_device_num;
	(void)tool_data;
	ompt_set_callback_t set_callback = (ompt_set_callback_t)lookup("ompt_set_callback");
	set_bt = (void (*)(int))hs_real_dlsym(RTLD_DEFAULT, "kmp_set_blocktime");
	get_bt = (int (*)(void))hs_real_dlsym(RTLD_DEFAULT, "kmp_get_blocktime");
	get_level = (int (*)(void))hs_real_dlsym(RTLD_DEFAULT, "omp_get_level");
	if (!set_callback || !set_bt || !get_bt || !get_level ||
	    set_callback(hs_ompt_callback_parallel_begin, (ompt_callback_t)parallel_begin) != hs_ompt_set_always)
		return 0; /* 0: libomp drops the tool and runs as without one */
	started_with = get_bt();
	__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
	return 1;
}

/* finalize reads nothing from libomp: it runs in libomp's shutdown, which
 * holds the locks kmp_get_blocktime takes. */
static void finalize(ompt_data_t *tool_data) { (void)tool_data; }

/* has_word says whether the blank-separated list holds NAME=VALUE. */
static int has_word(const char *list, const char *name, const char *value)
{
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)); p++) {
		if ((p != list && p[-1] != ' ') || p[n] != '=')
			continue;
		const char *v = p + n + 1, *end = strchr(v, ' ');
		size_t vn = end ? (size_t)(end - v) : strlen(v);
		if (vn == strlen(value) && !strncmp(v, value, vn))
			return 1;
	}
	return 0;
}

/* following says whether hybridsync-run started the program in its
 * following mode (its record names the GOMP_SPINCOUNT marker it set) and
 * the blocktime is nobody's: a KMP_BLOCKTIME set, by the user or by
 * HYBRIDSYNC_OPENMP=bounded, wins. ompfollow.go starts the follower on
 * the same record; this is read before the Go runtime may have started,
 * so in C. */
static int following(void)
{
	const char *set = getenv("HYBRIDSYNC_RUN_SET"), *spin = getenv("GOMP_SPINCOUNT");
	return set && spin && has_word(set, "GOMP_SPINCOUNT", spin) && !getenv("KMP_BLOCKTIME");
}

__attribute__((visibility("default"))) ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version,
										  const char *runtime_version)
{
	static ompt_start_tool_result_t tool = {initialize, finalize, {0}};
	(void)omp_version;
	if (!following())
		return NULL;
	snprintf(runtime, sizeof runtime, "%s", runtime_version ? runtime_version : "");
	return &tool;
}

int hs_ompt_ready(void) { return __atomic_load_n(&ready, __ATOMIC_ACQUIRE); }

void hs_ompt_runtime(char *buf, unsigned long len)
{
	if (len)
		snprintf(buf, len, "%s", hs_ompt_ready() ? runtime : "");
}

void hs_ompt_want(int ms) { __atomic_store_n(&want, ms < 0 ? started_with : ms, __ATOMIC_RELAXED); }

int hs_ompt_blocktime(void) { return __atomic_load_n(&want, __ATOMIC_RELAXED); }
