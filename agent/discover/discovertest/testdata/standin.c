/* A stand-in for a hypervisor process: it starts STANDIN_N threads named
 * as STANDIN_THREAD says (a printf format of the thread's index), as the
 * hypervisor names its vCPU threads, prints "ready" and waits. With
 * STANDIN_BUSY=1 the threads spin, as a running guest's vCPUs do, instead
 * of sleeping. Its command line is the hypervisor's; it reads none of it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *idle(void *arg) {
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static void *busy(void *arg) {
	volatile unsigned long n = 0;
	(void)arg;
	for (;;)
		n++;
	return NULL;
}

int main(void) {
	const char *fmt = getenv("STANDIN_THREAD");
	const char *n = getenv("STANDIN_N");
	const char *spin = getenv("STANDIN_BUSY");
	int count = n ? atoi(n) : 0;
	for (int i = 0; i < count && fmt; i++) {
		pthread_t t;
		char name[16];
		if (pthread_create(&t, NULL, spin && spin[0] == '1' ? busy : idle, NULL) != 0)
			return 1;
		snprintf(name, sizeof name, fmt, i);
		if (pthread_setname_np(t, name) != 0)
			return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
