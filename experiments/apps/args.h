// Shared by the suite's C/CUDA programs: --seconds S / --steps N, timers and
// the one JSON line each prints (nothing else goes to stdout).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct loop_args { double seconds; long steps; };

static struct loop_args parse_args(int argc, char **argv, const char *prog)
{
	struct loop_args a = {2.0, 0};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc) a.seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc) a.steps = atol(argv[++i]);
		else { fprintf(stderr, "usage: %s [--seconds S | --steps N]\n", prog); exit(2); }
	}
	if (a.seconds <= 0 && a.steps <= 0) { fprintf(stderr, "%s: --seconds or --steps must be positive\n", prog); exit(2); }
	return a;
}

static double clock_s(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

// loop_done: whether the timed loop that started at t0 (monotonic) and has
// done n steps should stop.
static int loop_done(struct loop_args a, long n, double t0)
{
	return a.steps > 0 ? n >= a.steps : clock_s(CLOCK_MONOTONIC) - t0 >= a.seconds;
}

// say_ready tells vgpu-probe apps that start-up is over (the suite's
// "ready" line): the contention setting goes in place from here on.
static void say_ready(void)
{
	fputs("apps: ready\n", stderr);
	fflush(stderr);
}

static void print_result(const char *prog, long n, double wall, double cpu)
{
	printf("{\"program\":\"%s\",\"steps\":%ld,\"wall_s\":%.6f,\"cpu_s\":%.6f}\n", prog, n, wall, cpu);
	fflush(stdout);
}
