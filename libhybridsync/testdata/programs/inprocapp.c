/* The suite's C harness (experiments/apps/loop.h) on the stand-in: per
 * step, four 50 µs kernels and a stream synchronize, run by run_loop, so
 * that --inproc ROUNDS (the arms compared inside one process) is tested
 * with the real library without a GPU. Prints the harness's JSON line to
 * stdout and the stand-in's counters to stderr.
 * Usage: inprocapp [--seconds S | --steps N | --inproc ROUNDS [--epoch-s S]] */
#include "testkit.h"
#include "loop.h"

static int step(void *arg)
{
	cudaStream_t s = *(cudaStream_t *)arg;
	for (int i = 0; i < 4; i++)
		CHECK(launch(i % 2 ? kernel_b : kernel_a, 50000, 1, s) == 0, "launch");
	CHECK(cudaStreamSynchronize(s) == 0, "sync");
	return 0;
}

int main(int argc, char **argv)
{
	struct loop_args a = parse_args(argc, argv, "inprocapp");
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s) == 0, "setup");
	standin_open();
	int rc = run_loop(a, "inprocapp", step, &s, 20);
	report_counters();
	return rc;
}
