/* hybridsync-openmp LIB: prints the OpenMP wait settings (NAME=VALUE
 * words on one line; none where the runtime's own are best) that
 * libhybridsync, at LIB, chooses for a program started now on the CPUs
 * this process may use, then a line saying why. hybridsync-run runs it
 * before it starts a program and applies the first line as it is; run by
 * hand, it says what the launcher would set here. Exit status 0, or 1
 * with one line saying why. Everything is on stdout: stderr is the
 * library's own, which the launcher leaves out (its load-time check of
 * the HYBRIDSYNC_* variables, said again as the program loads it). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*openmp_env_fn)(char *env, size_t n, char *why, size_t why_n);

int main(int argc, char **argv)
{
	if (argc != 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: hybridsync-openmp LIB (the libhybridsync.so whose choice to print)\n");
		return argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? 0 : 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("%s\n", dlerror());
		return 1;
	}
	openmp_env_fn f = (openmp_env_fn)dlsym(h, "hs_openmp_env");
	if (!f) {
		printf("%s has no hs_openmp_env (an older library)\n", argv[1]);
		return 1;
	}
	char env[256], why[512];
	if (f(env, sizeof env, why, sizeof why) != 0) {
		printf("%s\n", why);
		return 1;
	}
	printf("%s\n%s\n", env, why);
	return 0;
}
