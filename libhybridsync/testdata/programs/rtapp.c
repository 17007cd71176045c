/* An unmodified CUDA runtime program: launches, records, waits with
 * cudaEventSynchronize / cudaStreamSynchronize / cudaDeviceSynchronize from
 * several threads, and checks that no wait returned early or with the wrong
 * code. Linked against libcudart.so (the runtime path under LD_PRELOAD) or
 * with the runtime compiled in (static cudart: the driver path).
 * Usage: rtapp ITERATIONS THREADS [KERNEL_NS [LATER_NS]] (default 200000:
 * kernels of 200-500 µs; shorter ones show the waits the library leaves to
 * CUDA; LATER_NS replaces KERNEL_NS for the second half of the iterations,
 * kernels that grow long) */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "testkit.h"

static int iterations;
static int64_t kernel_ns = 200000, later_ns;
/* The preloaded library's hook switch (hs_interpose), when asked for. */
static int (*set_hooks)(int);
static int unseen_records;
/* With LATER_NS, the stand-in's count of CUDA's own waits that busy-waited
 * on unfinished work when the second half began (one thread), so that the
 * second half's own count is printed: with the library preloaded on a free
 * CPU, those are the waits on long kernels it left to CUDA. */
static long later_from;

static void *worker(void *arg)
{
	long id = (long)arg;
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0, "stream");
	CHECK(cudaEventCreateWithFlags(&ev, 2) == 0, "event");
	for (int i = 0; i < iterations; i++) {
		int64_t base = later_ns && i >= iterations / 2 ? later_ns : kernel_ns;
		int64_t d = base + base / 2 * ((i + id) % 4);
		if (later_ns && id == 0 && i == iterations / 2)
			later_from = *spin_waits;
		if (unseen_records && i > 0)
			set_hooks(2);
		CHECK(launch((i % 3) ? kernel_a : kernel_b, d, 64, s) == 0, "launch");
		CHECK(cudaEventRecord(ev, s) == 0, "record");
		if (unseen_records && i > 0)
			set_hooks(3);
		int64_t due = done_at(ev);
		cudaError_t r;
		switch (i % 3) {
		case 0:
		case 1:
			r = cudaEventSynchronize(ev);
			break;
		default:
			r = cudaStreamSynchronize(s);
			break;
		}
		CHECK(r == 0, "wait returned %d", r);
		CHECK(now_ns() >= due, "wait returned %lld ns before completion", (long long)(due - now_ns()));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 5) {
		fprintf(stderr, "usage: rtapp ITERATIONS THREADS [KERNEL_NS [LATER_NS]]\n");
		return 2;
	}
	if (argc >= 4)
		kernel_ns = atoll(argv[3]);
	if (argc == 5)
		later_ns = atoll(argv[4]);
	iterations = atoi(argv[1]);
	int threads = atoi(argv[2]);
	cudaEvent_t probe;
	CHECK(cudaEventCreate(&probe) == 0, "cuda init");
	standin_open();
	/* RTAPP_HOOKS=N: which interposer hooks run from here on (the
	 * preloaded library's hs_interpose), for the test of that switch.
	 * RTAPP_UNSEEN_RECORDS=1 (one thread): every launch and record after
	 * the first is made with the launch hooks off, unseen by the library,
	 * as a record inside a CUDA graph is. */
	const char *hooks = getenv("RTAPP_HOOKS");
	unseen_records = getenv("RTAPP_UNSEEN_RECORDS") != NULL;
	if (hooks || unseen_records) {
		set_hooks = (int (*)(int))dlsym(RTLD_DEFAULT, "hs_interpose");
		CHECK(set_hooks != NULL, "hs_interpose not found");
	}
	if (hooks)
		set_hooks(atoi(hooks));
	CHECK(!unseen_records || threads == 1, "RTAPP_UNSEEN_RECORDS needs one thread");

	pthread_t t[64];
	for (long i = 0; i < threads && i < 64; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (long i = 0; i < threads && i < 64; i++)
		pthread_join(t[i], NULL);
	if (later_ns)
		fprintf(stderr, "rtapp later-half spin=%ld\n", *spin_waits - later_from);

	/* Device-wide wait on the legacy stream. */
	CHECK(launch(kernel_a, 500000, 64, NULL) == 0, "launch");
	CHECK(cudaEventRecord(probe, NULL) == 0, "record");
	int64_t due = done_at(probe);
	CHECK(cudaDeviceSynchronize() == 0, "device sync");
	CHECK(now_ns() >= due, "device sync early");

	/* A failing kernel: the wait reports what CUDA reports. */
	cudaStream_t bad;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&bad) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	CHECK(launch(kernel_b, -300000, 1, bad) == 0, "launch");
	CHECK(cudaEventRecord(ev, bad) == 0, "record");
	due = done_at(ev);
	cudaError_t r = cudaEventSynchronize(ev);
	CHECK(r == 719, "failed kernel: wait returned %d, want 719", r);
	CHECK(now_ns() >= due, "failed kernel: early");
	/* An invalid handle. */
	static char junk[64];
	memset(junk, 0x5a, sizeof junk);
	r = cudaEventSynchronize((cudaEvent_t)junk);
	CHECK(r == 400, "invalid event: wait returned %d, want 400", r);
	report_counters();
	return 0;
}
