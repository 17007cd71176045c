/* The interposer's cost on the launch path: an unmodified program that
 * launches zero-length kernels on the stand-in in a loop, with an event
 * record every 16 launches (as a launch-bound step would). Run with and
 * without LD_PRELOAD; the difference is what observing a launch and a
 * record costs. Prints "launch_ns X" (median of 9 rounds) to stderr.
 * Usage: launchbench LAUNCHES */
#include <stdlib.h>

#include "testkit.h"

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100000;
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	int64_t per[9];
	for (int r = 0; r < 9; r++) {
		int64_t t0 = now_ns();
		for (int i = 0; i < n; i++) {
			CHECK(launch(kernel_a, 0, 1, s) == 0, "launch");
			if (i % 16 == 15)
				CHECK(cudaEventRecord(ev, s) == 0, "record");
		}
		per[r] = (now_ns() - t0) * 1000 / n; /* ps per launch */
		CHECK(cudaStreamSynchronize(s) == 0, "sync");
	}
	qsort(per, 9, sizeof per[0], cmp);
	fprintf(stderr, "launch_ns %.1f\n", per[4] / 1000.0);
	return 0;
}
