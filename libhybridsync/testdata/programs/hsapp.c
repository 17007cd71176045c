/* A program that uses libhybridsync's C API explicitly, linked against
 * libhybridsync.so or libhybridsync.a. Each subcommand checks one area and
 * exits 1 with a message on stderr when a check fails; stdout stays empty.
 * Usage: hsapp basic | idle | nocuda | badconfig | badenv VAR cuda|nocuda |
 *        threads N | fork | sigalrm | property SEED STEPS */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hybridsync.h>

#include "testkit.h"

static const char *const modes[] = {"hybrid", "paper", "spin", "yield", "block", "cuda-auto"};

static void init_mode(const char *mode)
{
	struct hs_config c = {.struct_size = sizeof c, .mode = mode};
	int rc = hs_init(&c);
	CHECK(rc == HS_OK, "hs_init(%s) = %d (%s): %s", mode, rc, hs_strerror(rc), hs_last_error());
}

/* step launches a kernel of ns, marks it, records ev and waits with hs_sync
 * (or hs_stream_sync), checking the result against the stand-in's. */
static void step(cudaStream_t s, cudaEvent_t ev, hs_kernel_t k, int64_t ns, int stream_wait)
{
	CHECK(launch(kernel_a, ns, 8, s) == 0, "launch");
	hs_launch_mark(s, k);
	CHECK(cudaEventRecord(ev, s) == 0, "record");
	int64_t due = done_at(ev);
	int want = result_of(ev);
	int rc = stream_wait ? hs_stream_sync(s, k) : hs_sync(ev, k);
	CHECK(now_ns() >= due, "returned %lld ns before completion", (long long)(due - now_ns()));
	CHECK(rc == want, "returned %d, cudaEventSynchronize gives %d", rc, want);
}

static void basic(void)
{
	CHECK(hs_stats_json(NULL, 0) == HS_ERR_STATE, "stats before init");
	CHECK(hs_init(NULL) == HS_OK, "hs_init: %s", hs_last_error());
	hs_kernel_t k = hs_kernel("step"), k2 = hs_kernel("step");
	CHECK(k != 0 && k == k2, "hs_kernel ids %llx %llx", (unsigned long long)k, (unsigned long long)k2);
	CHECK(hs_kernel(NULL) == 0 && hs_kernel("") == 0, "hs_kernel of nothing");
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	standin_open();
	for (int i = 0; i < 40; i++)
		step(s, ev, k, 300000, i % 4 == 3);

	/* Same codes as cudaEventSynchronize: invalid handle, failed kernel. */
	static char junk[64];
	memset(junk, 0x5a, sizeof junk);
	int want = cudaEventSynchronize((cudaEvent_t)junk);
	CHECK(want == 400 && hs_sync((hs_event_t)junk, k) == want, "invalid handle");
	cudaStream_t bad;
	CHECK(cudaStreamCreate(&bad) == 0, "stream");
	step(bad, ev, k, -200000, 0); /* 719 */
	CHECK(hs_stream_sync(bad, 0) == 719, "failed stream");

	char small[16];
	long n = hs_stats_json(small, sizeof small);
	CHECK(n > (long)sizeof small && strlen(small) == sizeof small - 1, "truncation: n=%ld", n);
	CHECK(hs_stats_json(NULL, 10) == HS_ERR_INVAL, "NULL buffer");
	char *buf = malloc(n + 1);
	CHECK(hs_stats_json(buf, n + 1) == n && (long)strlen(buf) == n, "full stats");
	CHECK(strstr(buf, "\"name\":\"step\"") && strstr(buf, "\"mode\":\"hybrid\"") && strstr(buf, "\"calls\":"),
	      "stats content: %s", buf);
	/* Stats go to stderr for the Go test to parse. */
	fprintf(stderr, "STATS %s\n", buf);
	free(buf);

	CHECK(hs_shutdown() == HS_OK && hs_shutdown() == HS_ERR_STATE, "shutdown");
	CHECK(hs_stats_json(NULL, 0) == HS_ERR_STATE, "stats after shutdown");
	step(s, ev, k, 100000, 0); /* plain CUDA now */
	CHECK(hs_init(NULL) == HS_OK, "re-init");
	step(s, ev, k, 100000, 0);
	CHECK(strcmp(hs_strerror(HS_ERR_NO_CUDA), "CUDA driver not available") == 0, "strerror");
}

static void nocuda(void)
{
	int rc = hs_init(NULL);
	CHECK(rc == HS_ERR_NO_CUDA, "hs_init = %d, want HS_ERR_NO_CUDA", rc);
	CHECK(strstr(hs_last_error(), "cannot load the CUDA driver"), "message: %s", hs_last_error());
	static char junk[64];
	CHECK(hs_sync((hs_event_t)junk, 0) == 3, "hs_sync without a driver");
	CHECK(hs_stream_sync(NULL, 0) == 3, "hs_stream_sync without a driver");
	CHECK(hs_stats_json(NULL, 0) == HS_ERR_STATE, "stats without a driver");
}

static void badconfig(void)
{
	int rc = hs_init(NULL); /* HYBRIDSYNC_MODE=bogus in the environment */
	CHECK(rc == HS_ERR_CONFIG, "hs_init = %d, want HS_ERR_CONFIG", rc);
	CHECK(strstr(hs_last_error(), "HYBRIDSYNC_MODE"), "message: %s", hs_last_error());
	struct hs_config c = {.struct_size = 3};
	CHECK(hs_init(&c) == HS_ERR_INVAL && strstr(hs_last_error(), "struct_size"), "struct_size");
	init_mode("spin"); /* an explicit mode wins over the environment */
	struct hs_config c2 = {.struct_size = sizeof c2, .mode = "fast"};
	CHECK(hs_init(&c2) == HS_ERR_CONFIG, "bad explicit mode");
}

/* badenv VAR cuda|nocuda: VAR holds a bad value. hs_init says so, naming
 * it, whether or not there is a driver (the configuration is checked
 * first), and the waits are CUDA's own. */
static void badenv(const char *var, int cuda)
{
	int rc = hs_init(NULL);
	CHECK(rc == HS_ERR_CONFIG, "hs_init = %d (%s), want HS_ERR_CONFIG: %s", rc, hs_strerror(rc), hs_last_error());
	CHECK(strstr(hs_last_error(), var), "message %s: want it to name %s", hs_last_error(), var);
	CHECK(hs_stats_json(NULL, 0) == HS_ERR_STATE, "stats of a library that did not start");
	if (!cuda) {
		static char junk[64];
		CHECK(hs_sync((hs_event_t)junk, 0) == 3, "hs_sync without a driver");
		return;
	}
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	standin_open();
	for (int i = 0; i < 5; i++)
		step(s, ev, 0, 100000, i % 2);
}

static hs_kernel_t tk;
static void *thread_main(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	for (int i = 0; i < 30; i++)
		step(s, ev, tk, 100000 + rand_r(&seed) % 700000, i % 5 == 4);
	return NULL;
}

static void threads(int n)
{
	cudaEvent_t probe;
	CHECK(cudaEventCreate(&probe) == 0, "init");
	standin_open();
	tk = hs_kernel("threads");
	pthread_t t[128];
	if (n > 128)
		n = 128;
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

static void forked(void)
{
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	standin_open();
	hs_kernel_t k = hs_kernel("fork");
	for (int i = 0; i < 10; i++)
		step(s, ev, k, 200000, 0);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		/* A child that does its own work and exits normally (atexit,
		 * destructors): the library stays out of its way. */
		CHECK(hs_kernel("child") == 0, "hs_kernel in child");
		CHECK(hs_stats_json(NULL, 0) == HS_ERR_STATE, "stats in child");
		CHECK(hs_init(NULL) == HS_ERR_STATE, "init in child");
		char *p = malloc(1 << 20);
		memset(p, 1, 1 << 20);
		free(p);
		exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	for (int i = 0; i < 10; i++)
		step(s, ev, k, 200000, 0);
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static void sigalrm(void)
{
	/* The program's own handler, installed after the library loaded,
	 * without SA_RESTART: every sleep and wait gets interrupted. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
	struct itimerval it = {{0, 700}, {0, 700}};
	CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0, "setitimer");
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	standin_open();
	hs_kernel_t k = hs_kernel("alarm");
	for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
		init_mode(modes[m]);
		for (int i = 0; i < 25; i++)
			step(s, ev, k, 100000 + 150000 * (i % 5), i % 4 == 3);
	}
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	CHECK(alarms > 0, "no alarm arrived: the test proved nothing");
	struct sigaction cur;
	sigaction(SIGALRM, NULL, &cur);
	CHECK(cur.sa_handler == on_alarm, "the library replaced the program's handler");
}

/* property: random kernels, faults, handles and modes; every wait must end
 * no earlier than the stand-in's completion time and with its code. */
static void property(unsigned seed, int steps)
{
	cudaStream_t s;
	cudaEvent_t ev;
	CHECK(cudaStreamCreate(&s) == 0 && cudaEventCreateWithFlags(&ev, 2) == 0, "setup");
	standin_open();
	hs_kernel_t ks[3] = {hs_kernel("p0"), hs_kernel("p1"), 0};
	static char junk[64];
	memset(junk, 0x33, sizeof junk);
	for (int i = 0; i < steps; i++) {
		if (i % 40 == 0)
			init_mode(modes[rand_r(&seed) % 6]);
		unsigned r = rand_r(&seed);
		hs_kernel_t k = ks[r % 3];
		int64_t ns = (r >> 4) % 1500000;
		switch ((r >> 24) % 16) {
		case 0: /* a failing kernel, on a fresh stream (errors are sticky) */
			CHECK(cudaStreamCreate(&s) == 0, "stream");
			step(s, ev, k, -ns - 1, 0);
			CHECK(cudaStreamCreate(&s) == 0, "stream");
			break;
		case 1: {
			int want = cudaEventSynchronize((cudaEvent_t)junk);
			CHECK(hs_sync((hs_event_t)junk, k) == want, "invalid handle");
			break;
		}
		case 2: /* no launch mark: an unknown launch time */
			CHECK(launch(kernel_b, ns, 1, s) == 0 && cudaEventRecord(ev, s) == 0, "launch");
			{
				int64_t due = done_at(ev);
				int rc = hs_sync(ev, k);
				CHECK(now_ns() >= due && rc == result_of(ev), "unmarked wait: rc %d", rc);
			}
			break;
		default:
			step(s, ev, k, ns, (r >> 28) % 3 == 0);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: hsapp basic|idle|nocuda|badconfig|badenv VAR cuda|nocuda|threads N|fork|sigalrm|property SEED STEPS\n");
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "basic"))
		basic();
	else if (!strcmp(cmd, "idle"))
		; /* links the library and calls nothing: only its load runs */
	else if (!strcmp(cmd, "nocuda"))
		nocuda();
	else if (!strcmp(cmd, "badconfig"))
		badconfig();
	else if (!strcmp(cmd, "badenv") && argc == 4)
		badenv(argv[2], !strcmp(argv[3], "cuda"));
	else if (!strcmp(cmd, "threads") && argc == 3)
		threads(atoi(argv[2]));
	else if (!strcmp(cmd, "fork"))
		forked();
	else if (!strcmp(cmd, "sigalrm"))
		sigalrm();
	else if (!strcmp(cmd, "property") && argc == 4)
		property((unsigned)strtoul(argv[2], NULL, 10), atoi(argv[3]));
	else {
		fprintf(stderr, "hsapp: unknown command\n");
		return 2;
	}
	return 0;
}
