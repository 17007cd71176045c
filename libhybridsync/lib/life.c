/* The library's life: see life.h. Everything that can go wrong before the
 * policy runs (no driver, bad configuration) ends here, in a state that
 * sends every wait to CUDA's own, never in a crash of the host program.
 * Calls the C core (hs_core_load, logging) and Go (hsgo_check_env,
 * hsgo_configure, hsgo_start, hsgo_shutdown). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"
#include "core.h"
#include "hybridsync.h"
#include "life.h"

atomic_int hs_lib_state;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_err[512];

/* What the load-time check said of the environment, one line per bad
 * value (Go's hybridsync.CheckEnv, the table of every HYBRIDSYNC_*
 * variable). */
static char said_at_load[2048];
static pthread_t check_thread;
static int checking; /* check_thread runs, and is joined by env_checked */
static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;

static void *check_env(void *arg)
{
	(void)arg;
	if (hsgo_check_env(said_at_load, sizeof said_at_load) == 0)
		return NULL;
	for (char *line = said_at_load, *end; *line; line = end + 1) {
		end = strchr(line, '\n');
		if (end)
			*end = 0;
		hs_log_user(line);
		if (!end)
			break;
		*end = '\n';
	}
	return NULL;
}

/* env_checked waits for the load-time check to have said what it had to:
 * before a configuration error is said (it is said once), and at exit. */
static void env_checked(void)
{
	pthread_mutex_lock(&check_mu);
	if (checking && !hs_in_forked_child())
		pthread_join(check_thread, NULL);
	checking = 0;
	pthread_mutex_unlock(&check_mu);
}

/* Every HYBRIDSYNC_* value is checked once, as the library loads, whether
 * or not the program ever calls CUDA: a bad one is said on stderr, one
 * line each, at every log level. The check is Go's, and a call into Go
 * waits for the Go runtime, which a constructor of this library starts:
 * in a program linked with libhybridsync.a that one may run after this
 * one, so the call is made on a thread of its own, which the program's
 * exit waits for. */
__attribute__((constructor)) static void check_env_at_load(void)
{
	if (pthread_create(&check_thread, NULL, check_env, NULL) != 0)
		return;
	checking = 1;
	atexit(env_checked);
}

/* A bad configuration is a user error: one line on stderr at every level
 * (hs_log_user), unless the constructor said it already, and the library
 * stays out of the way. */
static int config_failed(const char *err)
{
	snprintf(last_err, sizeof last_err, "configuration: %s", err);
	env_checked();
	if (!strstr(said_at_load, err))
		hs_log_user(last_err);
	atomic_store(&hs_lib_state, HS_LIB_DONE);
	return HS_ERR_CONFIG;
}

/* The configuration (the environment and cfg) is parsed once, before
 * anything else, CUDA included: a bad value is reported as what it is on
 * any machine, not hidden behind a missing driver. */
static int init_locked(const struct hs_config *cfg)
{
	char err[400] = "";
	if (hsgo_configure((struct hs_config *)cfg, err, sizeof err) != 0)
		return config_failed(err);
	if (hs_core_load() != 0) {
		snprintf(last_err, sizeof last_err, "%s", hs_core_error());
		hs_log(HS_LOG_ERROR, "%s", last_err);
		atomic_store(&hs_lib_state, HS_LIB_DONE);
		return HS_ERR_NO_CUDA;
	}
	if (hsgo_start() != 0)
		return config_failed("no configuration parsed");
	last_err[0] = 0;
	atomic_store(&hs_lib_state, HS_LIB_READY);
	return HS_OK;
}

int hs_lib_init(const struct hs_config *cfg)
{
	pthread_mutex_lock(&init_mu);
	int rc = init_locked(cfg);
	pthread_mutex_unlock(&init_mu);
	return rc;
}

int hs_lib_start(void)
{
	pthread_mutex_lock(&init_mu);
	if (atomic_load(&hs_lib_state) == HS_LIB_NEW)
		init_locked(NULL);
	pthread_mutex_unlock(&init_mu);
	return atomic_load(&hs_lib_state) == HS_LIB_READY ? 0 : -1;
}

int hs_lib_shutdown(void)
{
	pthread_mutex_lock(&init_mu);
	int rc = HS_ERR_STATE;
	if (atomic_load(&hs_lib_state) == HS_LIB_READY) {
		hsgo_shutdown();
		atomic_store(&hs_lib_state, HS_LIB_DONE);
		rc = HS_OK;
	}
	pthread_mutex_unlock(&init_mu);
	return rc;
}

const char *hs_lib_error(void) { return last_err; }

void hs_lib_set_error(const char *msg) { snprintf(last_err, sizeof last_err, "%s", msg); }
