/* The library's cost per step of a program like the CuPy and PyTorch ones
 * of experiments/apps: per step, LAUNCHES short kernels (two alternating
 * functions) with HOST_NS of host work before each, then one stream
 * synchronize, which finds the last kernel still running. Run with and
 * without LD_PRELOAD on the stand-in; the difference is what observing the
 * launches and taking the wait costs. Prints "step_ns X" (median of 9
 * rounds) to stderr.
 * STEPBENCH_PAUSE_MS=P: between the fourth and fifth rounds the preloaded
 * library's hooks are switched off for P ms (hs_interpose), as
 * experiments/apps/inproc.py does between its arms; then "elapsed_ns X"
 * (all rounds and the pause) goes to stderr too.
 * Usage: stepbench STEPS [LAUNCHES [KERNEL_NS [HOST_NS]]] */
#include <stdlib.h>
#include <unistd.h>

#include "testkit.h"

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void host_work(int64_t ns)
{
	int64_t end = now_ns() + ns;
	while (now_ns() < end)
		;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 2000;
	int launches = argc > 2 ? atoi(argv[2]) : 8;
	int64_t kernel_ns = argc > 3 ? atoll(argv[3]) : 5000;
	int64_t host_ns = argc > 4 ? atoll(argv[4]) : 8000;
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s) == 0, "setup");
	const char *pause = getenv("STEPBENCH_PAUSE_MS");
	int (*interpose)(int) = NULL;
	if (pause) {
		interpose = (int (*)(int))dlsym(RTLD_DEFAULT, "hs_interpose");
		CHECK(interpose != NULL, "hs_interpose not found");
	}
	int64_t per[9], start = now_ns();
	for (int r = 0; r < 9; r++) {
		if (pause && r == 4) {
			int hooks = interpose(0);
			usleep(atoi(pause) * 1000);
			interpose(hooks);
		}
		int64_t t0 = now_ns();
		for (int i = 0; i < steps; i++) {
			for (int k = 0; k < launches; k++) {
				host_work(host_ns);
				CHECK(launch(k % 2 ? kernel_b : kernel_a, kernel_ns, 1, s) == 0, "launch");
			}
			CHECK(cudaStreamSynchronize(s) == 0, "sync");
		}
		per[r] = (now_ns() - t0) / steps;
	}
	qsort(per, 9, sizeof per[0], cmp);
	fprintf(stderr, "step_ns %lld\n", (long long)per[4]);
	if (pause)
		fprintf(stderr, "elapsed_ns %lld\n", (long long)(now_ns() - start));
	return 0;
}
