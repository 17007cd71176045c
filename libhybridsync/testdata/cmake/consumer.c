/* Built by CMake through find_package(hybridsync); run against the CUDA
 * stand-in. Exits non-zero with a message on stderr if the API misbehaves. */
#include <stdio.h>
#include <hybridsync.h>

int main(void)
{
	int rc = hs_init(NULL);
	if (rc != HS_OK) {
		fprintf(stderr, "hs_init: %s: %s\n", hs_strerror(rc), hs_last_error());
		return 1;
	}
	if (hs_kernel("consumer") == 0 || hs_stats_json(NULL, 0) <= 0 || hs_shutdown() != HS_OK) {
		fprintf(stderr, "API misbehaved\n");
		return 1;
	}
	return 0;
}
