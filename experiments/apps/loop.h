// The timed loop of the suite's C/CUDA programs: --seconds S / --steps N,
// timers, the loop and the one JSON line each prints (nothing else goes to
// stdout); and --inproc ROUNDS, the arms compared inside one process.
//
// --inproc ROUNDS [--epoch-s S]: instead of one timed loop, ROUNDS rounds
// of CUDA's default mode, CUDA's blocking-sync mode and libhybridsync, S
// seconds each (default 0.3), in the balanced order inproc.py uses for the
// Python programs (it says why: ROUNDS a multiple of 6 balances 3 arms).
// Needs LD_PRELOAD=libhybridsync.so: its hs_interpose switches the
// library's hooks off for the CUDA arms, and the context's schedule is
// switched with cuCtxSetFlags for the blocking one. The JSON line then
// carries "rounds" (vgpu-probe apps, in_process), each with its arm's
// slice (inproc_slice) and, where the process is pinned to one CPU, how
// long that CPU was busy (inproc_cpu_busy).
// APPS_INPROC_ARMS=a,b,... picks other arms (experiments/apps/diag/arms.sh):
// hooks-observe, the library with only its launch and record observers on
// (waits alone would see no records, a configuration no program runs);
// cuda-default-again, the default arm once more, an A/A control.
// The arm table below is also inproc.py's, and its first arms are the
// suite's product arms (experiments/apps/suite.Arms): libhybridsync/ctest's
// TestInProcessArmTablesAgree checks that the three agree.
// APPS_INPROC_UNMITIGATED=a,b,... names arms that run without the agent's
// short slice (vgpu-probe apps --mitigate-arms): see inproc_unmitigate.
#pragma once
// For hs_interpose's hook sets (HS_HOOK_*); by path, so that the suite's
// programs build with no include flags.
#include "../../libhybridsync/include/hybridsync.h"
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct loop_args { double seconds; long steps; int inproc; double epoch_s; };

static struct loop_args parse_args(int argc, char **argv, const char *prog)
{
	struct loop_args a = {2.0, 0, 0, 0.3};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc) a.seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc) a.steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--inproc") && i + 1 < argc) a.inproc = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--epoch-s") && i + 1 < argc) a.epoch_s = atof(argv[++i]);
		else { fprintf(stderr, "usage: %s [--seconds S | --steps N | --inproc ROUNDS [--epoch-s S]]\n", prog); exit(2); }
	}
	if (a.seconds <= 0 && a.steps <= 0) { fprintf(stderr, "%s: --seconds or --steps must be positive\n", prog); exit(2); }
	if (a.inproc < 0 || a.inproc > 1000 || a.epoch_s <= 0) { fprintf(stderr, "%s: --inproc must be 1-1000 and --epoch-s positive\n", prog); exit(2); }
	return a;
}

static double clock_s(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

// say_ready tells vgpu-probe apps that start-up is over (the suite's
// "ready" line): the contention setting goes in place from here on.
static void say_ready(void)
{
	fputs("apps: ready\n", stderr);
	fflush(stderr);
}

// A step of the program: 0, or non-zero after printing why.
typedef int (*step_fn)(void *arg);

// timed_steps runs steps until n are done (n > 0) or seconds have passed,
// and returns how many, or -1 if one failed.
static long timed_steps(step_fn step, void *arg, long n, double seconds, double *wall, double *cpu)
{
	long k = 0;
	double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	do {
		if (step(arg)) return -1;
		k++;
	} while (n > 0 ? k < n : clock_s(CLOCK_MONOTONIC) - t0 < seconds);
	*wall = clock_s(CLOCK_MONOTONIC) - t0;
	*cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	return k;
}

// The arms: their names, the library's hooks (hs_interpose's set) and
// whether the context is switched to blocking-sync. The first
// INPROC_DEFAULT_ARMS run unless APPS_INPROC_ARMS says otherwise.
static const struct inproc_arm { const char *name; int hooks, blocking; } inproc_arm_table[] = {
	{"cuda-default", 0, 0}, {"cuda-blocking", 0, 1}, {"hybridsync", HS_HOOK_ALL, 0},
	{"hooks-observe", HS_HOOK_OBSERVE, 0}, {"cuda-default-again", 0, 0},
};
#define INPROC_MAX_ARMS ((int)(sizeof inproc_arm_table / sizeof *inproc_arm_table))
#define INPROC_DEFAULT_ARMS 3

// inproc_pick fills arms (indexes of inproc_arm_table) from
// APPS_INPROC_ARMS, or the default ones; returns how many, 0 on a bad list.
static int inproc_pick(int *arms, const char *prog)
{
	const char *v = getenv("APPS_INPROC_ARMS");
	if (!v || !*v) { for (int i = 0; i < INPROC_DEFAULT_ARMS; i++) arms[i] = i; return INPROC_DEFAULT_ARMS; }
	char buf[256];
	snprintf(buf, sizeof buf, "%s", v);
	int n = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k = -1;
		for (int i = 0; i < INPROC_MAX_ARMS; i++) if (!strcmp(t, inproc_arm_table[i].name)) k = i;
		if (k < 0 || n == INPROC_MAX_ARMS) { fprintf(stderr, "%s: APPS_INPROC_ARMS: unknown or too many arms at %s\n", prog, t); return 0; }
		arms[n++] = k;
	}
	return n;
}

// The kernel's struct sched_attr (sched_setattr(2)).
struct inproc_sched_attr {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t prio;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};

#define INPROC_MAX_THREADS 512

// The slices an arm without mitigation took away: each thread's, to give
// back when the arm ends.
struct inproc_slices {
	int n, tid[INPROC_MAX_THREADS];
	uint64_t runtime[INPROC_MAX_THREADS];
};

// inproc_getattr reads tid's scheduling attributes (0: the calling
// thread); 0, or -1 with errno.
static int inproc_getattr(int tid, struct inproc_sched_attr *a)
{
	memset(a, 0, sizeof *a);
	return (int)syscall(SYS_sched_getattr, tid, a, sizeof *a, 0);
}

// inproc_set_runtime sets tid's sched_runtime (its EEVDF slice; 0: the
// kernel's default) and keeps its policy, nice value and reset-on-fork
// flag, as agent/mitigate does; SCHED_IDLE and real-time threads are left
// alone. *was gets the runtime it had. 0, or -1 with errno.
static int inproc_set_runtime(int tid, uint64_t runtime, uint64_t *was)
{
	struct inproc_sched_attr a;
	if (inproc_getattr(tid, &a)) return -1;
	if (was) *was = a.runtime;
	if (a.policy != 0 && a.policy != 3) return 0; // SCHED_OTHER, SCHED_BATCH
	a.size = sizeof a, a.flags &= 0x01;           // SCHED_FLAG_RESET_ON_FORK
	a.runtime = runtime, a.deadline = a.period = 0;
	return (int)syscall(SYS_sched_setattr, tid, &a, 0);
}

// inproc_unmitigate gives every thread of the process the kernel's default
// slice, keeping in s what each had. An arm named in
// APPS_INPROC_UNMITIGATED runs so, inside a process the agent mitigates
// (vgpu-probe apps --with-agent --mitigate ... --mitigate-arms): its
// time is then what the program gets without the agent, beside arms that
// keep the slice, in the same process. A thread started inside the arm
// keeps the slice it inherits. 0, or -1 with errno.
static int inproc_unmitigate(struct inproc_slices *s)
{
	DIR *d = opendir("/proc/self/task");
	if (!d) return -1;
	int rc = 0;
	s->n = 0;
	for (struct dirent *e; (e = readdir(d)) && s->n < INPROC_MAX_THREADS;) {
		int tid = atoi(e->d_name);
		if (tid <= 0) continue;
		if (inproc_set_runtime(tid, 0, &s->runtime[s->n])) {
			if (errno != ESRCH) rc = -1; // a thread that ended meanwhile is no failure
			continue;
		}
		s->tid[s->n++] = tid;
	}
	closedir(d);
	return rc;
}

// inproc_remitigate gives back what inproc_unmitigate took.
static int inproc_remitigate(struct inproc_slices *s)
{
	int rc = 0;
	for (int i = 0; i < s->n; i++)
		if (inproc_set_runtime(s->tid[i], s->runtime[i], NULL) && errno != ESRCH) rc = -1;
	s->n = 0;
	return rc;
}

// inproc_slice is the calling thread's slice now (sched_runtime; the
// kernel's default where none was set), 0 where it cannot be read: each
// round records its arm's, so that a reader can check which ran with the
// agent's slice.
static uint64_t inproc_slice(void)
{
	struct inproc_sched_attr a;
	return inproc_getattr(0, &a) ? 0 : a.runtime;
}

// inproc_cpu_busy is how long the one CPU this process may run on has
// been busy (/proc/stat: user, nice, system, irq and softirq time; steal
// is the host's, not a neighbour's), or -1 where the process may run on
// several CPUs or it cannot be read. Over a round, its growth less the
// program's own CPU time is what else ran on the CPU, the co-runner in
// the suite: what the arm left its neighbour. /proc/stat counts in clock
// ticks (10 ms at USER_HZ 100), so a 0.3 s round reads to about 3%.
static double inproc_cpu_busy(void)
{
	char line[512];
	int cpu = -1, end = 0;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f) return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Cpus_allowed_list: %d%n", &cpu, &end) == 1) break;
	fclose(f);
	if (cpu < 0 || (line[end] != '\n' && line[end] != 0)) return -1; // a list or range of CPUs
	char want[32];
	int k = snprintf(want, sizeof want, "cpu%d ", cpu);
	double busy = -1;
	if (!(f = fopen("/proc/stat", "r"))) return -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long long u, n, s, idle, io, irq, sirq;
		if (strncmp(line, want, k)) continue;
		if (sscanf(line + k, "%llu %llu %llu %llu %llu %llu %llu", &u, &n, &s, &idle, &io, &irq, &sirq) == 7)
			busy = (double)(u + n + s + irq + sirq) / sysconf(_SC_CLK_TCK);
		break;
	}
	fclose(f);
	return busy;
}

// inproc_listed says whether name is in the comma-separated list v.
static int inproc_listed(const char *v, const char *name)
{
	size_t k = strlen(name);
	for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, name, k) && (p[k] == ',' || p[k] == 0)) return 1;
	return 0;
}

// inproc holds what switches the arms: the library's hook switch, the
// current context's schedule, and the arms without the agent's slice.
struct inproc {
	int (*interpose)(int);
	int (*set_flags)(unsigned);
	unsigned own;
	const char *unmitigated; // APPS_INPROC_UNMITIGATED
	struct inproc_slices taken;
};

static int inproc_open(struct inproc *p, const char *prog)
{
	p->interpose = (int (*)(int))dlsym(RTLD_DEFAULT, "hs_interpose");
	if (!p->interpose) { fprintf(stderr, "%s: --inproc: hs_interpose not found: run it under LD_PRELOAD=libhybridsync.so\n", prog); return -1; }
	void *cu = dlopen("libcuda.so.1", RTLD_NOW);
	int (*get_flags)(unsigned *) = cu ? (int (*)(unsigned *))dlsym(cu, "cuCtxGetFlags") : NULL;
	p->set_flags = cu ? (int (*)(unsigned))dlsym(cu, "cuCtxSetFlags") : NULL;
	if (!get_flags || !p->set_flags || get_flags(&p->own) != 0) {
		fprintf(stderr, "%s: --inproc: no CUDA context whose schedule cuCtxGetFlags/cuCtxSetFlags can switch\n", prog);
		return -1;
	}
	p->unmitigated = getenv("APPS_INPROC_UNMITIGATED");
	p->taken.n = 0;
	return 0;
}

// inproc_enter puts arm (an index of inproc_arms) in place; inproc_leave
// goes back to hooks off and the context's own schedule.
static int inproc_enter(struct inproc *p, int arm, const char *prog)
{
	const unsigned sched_mask = 0x07, blocking_sync = 0x04;
	if (inproc_arm_table[arm].blocking && p->set_flags((p->own & ~sched_mask) | blocking_sync) != 0) {
		fprintf(stderr, "%s: --inproc: cuCtxSetFlags failed\n", prog);
		return -1;
	}
	if (inproc_listed(p->unmitigated, inproc_arm_table[arm].name) && inproc_unmitigate(&p->taken)) {
		fprintf(stderr, "%s: --inproc: APPS_INPROC_UNMITIGATED: sched_setattr: %s\n", prog, strerror(errno));
		return -1;
	}
	if (inproc_arm_table[arm].hooks) p->interpose(inproc_arm_table[arm].hooks);
	return 0;
}

static int inproc_leave(struct inproc *p, const char *prog)
{
	p->interpose(0);
	p->set_flags(p->own);
	if (inproc_remitigate(&p->taken)) {
		fprintf(stderr, "%s: --inproc: giving back the slices: sched_setattr: %s\n", prog, strerror(errno));
		return -1;
	}
	return 0;
}

// nth_order sets order to the k-th permutation of arms[0..n) in
// lexicographic order of positions (as Python's itertools.permutations).
static void nth_order(int *order, const int *arms, int n, unsigned long k)
{
	int pool[INPROC_MAX_ARMS];
	unsigned long f = 1;
	memcpy(pool, arms, n * sizeof *pool);
	for (int i = 2; i < n; i++) f *= i; // (n-1)!
	for (int i = 0; i < n; i++) {
		int j = (int)(k / f);
		k %= f;
		order[i] = pool[j];
		memmove(pool + j, pool + j + 1, (n - j - 1) * sizeof *pool);
		if (n - 1 - i > 1) f /= n - 1 - i;
	}
}

// inproc_rounds runs the rounds and prints the JSON line with them.
static int inproc_rounds(struct loop_args a, const char *prog, step_fn step, void *arg, long warmup)
{
	struct inproc p;
	int arms[INPROC_MAX_ARMS], n = inproc_pick(arms, prog);
	if (!n || inproc_open(&p, prog)) return 1;
	struct round { int round, arm; long steps; double wall, cpu, busy; uint64_t slice; } *rs = (struct round *)calloc(n * a.inproc, sizeof *rs);
	if (!rs) return 1;
	if (inproc_leave(&p, prog)) return 1;
	double w, c;
	for (int i = 0; i < n; i++) { // warm-up in each arm; the library learns the kernels
		if (inproc_enter(&p, arms[i], prog)) return 1;
		if (timed_steps(step, arg, warmup, 0, &w, &c) < 0) return 1;
		if (inproc_leave(&p, prog)) return 1;
	}
	unsigned long perms = 1;
	for (int i = 2; i <= n; i++) perms *= i;
	long steps = 0;
	double wall = 0, cpu = 0;
	for (int r = 0; r < a.inproc; r++) {
		int order[INPROC_MAX_ARMS];
		nth_order(order, arms, n, (unsigned long)r % perms);
		for (int i = 0; i < n; i++) {
			struct round *x = &rs[n * r + i];
			if (inproc_enter(&p, order[i], prog)) return 1;
			if (step(arg)) return 1; // the switch settles outside the timed part
			double busy0 = inproc_cpu_busy();
			x->steps = timed_steps(step, arg, 0, a.epoch_s, &x->wall, &x->cpu);
			double busy1 = inproc_cpu_busy();
			x->busy = busy0 >= 0 && busy1 >= 0 ? busy1 - busy0 : -1;
			x->slice = inproc_slice();
			if (inproc_leave(&p, prog) || x->steps < 0) return 1;
			x->round = r, x->arm = order[i];
			steps += x->steps, wall += x->wall, cpu += x->cpu;
		}
	}
	p.interpose(HS_HOOK_ALL);
	printf("{\"program\":\"%s\",\"steps\":%ld,\"wall_s\":%.6f,\"cpu_s\":%.6f,\"rounds\":[", prog, steps, wall, cpu);
	for (int i = 0; i < n * a.inproc; i++) {
		printf("%s{\"round\":%d,\"arm\":\"%s\",\"steps\":%ld,\"wall_s\":%.6f,\"cpu_s\":%.6f,\"slice_ns\":%llu", i ? "," : "",
		       rs[i].round, inproc_arm_table[rs[i].arm].name, rs[i].steps, rs[i].wall, rs[i].cpu, (unsigned long long)rs[i].slice);
		if (rs[i].busy >= 0) printf(",\"cpu_busy_s\":%.2f", rs[i].busy);
		printf("}");
	}
	printf("]}\n");
	fflush(stdout);
	free(rs);
	return 0;
}

// run_loop is the program's main loop after its set-up: warmup steps,
// then the timed loop (--seconds or --steps), or the rounds of --inproc;
// it prints the JSON line and returns main's exit status.
static int run_loop(struct loop_args a, const char *prog, step_fn step, void *arg, long warmup)
{
	say_ready();
	if (a.inproc) return inproc_rounds(a, prog, step, arg, warmup);
	double wall, cpu;
	if (timed_steps(step, arg, warmup, 0, &wall, &cpu) < 0) return 1;
	long n = timed_steps(step, arg, a.steps, a.seconds, &wall, &cpu);
	if (n < 0) return 1;
	printf("{\"program\":\"%s\",\"steps\":%ld,\"wall_s\":%.6f,\"cpu_s\":%.6f}\n", prog, n, wall, cpu);
	fflush(stdout);
	return 0;
}
