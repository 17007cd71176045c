/* The library's life: see life.h. Everything that can go wrong before the
 * policy runs (no driver, bad configuration) ends here, in a state that
 * sends every wait to CUDA's own, never in a crash of the host program.
 * Calls the C core (hs_core_load, logging) and Go (hsgo_init,
 * hsgo_shutdown). */
#include <pthread.h>
#include <stdio.h>

#include "_cgo_export.h"
#include "core.h"
#include "hybridsync.h"
#include "life.h"

atomic_int hs_lib_state;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_err[512];

/* A bad configuration is a user error: one line on stderr at
 * every level (hs_log_user), and the library stays out of the way. */
static int config_failed(const char *err)
{
	snprintf(last_err, sizeof last_err, "configuration: %s", err);
	hs_log_user(last_err);
	atomic_store(&hs_lib_state, HS_LIB_DONE);
	return HS_ERR_CONFIG;
}

/* The configuration is checked before anything else, CUDA included: a bad
 * value is reported as what it is on any machine, not hidden behind a
 * missing driver. */
static int init_locked(const struct hs_config *cfg)
{
	char err[400] = "";
	const char *empty_to_null[3] = {cfg ? cfg->mode : NULL, cfg ? cfg->stats_path : NULL, cfg ? cfg->log_level : NULL};
	for (int i = 0; i < 3; i++)
		if (empty_to_null[i] && !*empty_to_null[i])
			empty_to_null[i] = NULL;
	char *mode = (char *)empty_to_null[0], *stats = (char *)empty_to_null[1], *log = (char *)empty_to_null[2];
	double max_spin = cfg ? cfg->max_spin_us : 0;
	if (hsgo_check_config(mode, max_spin, stats, log, err, sizeof err) != 0)
		return config_failed(err);
	if (hs_core_load() != 0) {
		snprintf(last_err, sizeof last_err, "%s", hs_core_error());
		hs_log(HS_LOG_ERROR, "%s", last_err);
		atomic_store(&hs_lib_state, HS_LIB_DONE);
		return HS_ERR_NO_CUDA;
	}
	if (hsgo_init(mode, max_spin, stats, log, err, sizeof err) != 0)
		return config_failed(err);
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
