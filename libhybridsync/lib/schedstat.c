/* The calling thread's run delay and CPU time, for the wait runner
 * (wait.c): see schedstat.h. Calls only the kernel. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "schedstat.h"

int hs_run_delay(int64_t *delay, int64_t *runs)
{
	char buf[96];
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *s = strchr(buf, ' '), *e1, *e2;
	if (s == NULL)
		return 0;
	long long d = strtoll(s + 1, &e1, 10), r = strtoll(e1, &e2, 10);
	if (e1 == s + 1 || e2 == e1 || d < 0 || r < 0)
		return 0;
	*delay = d;
	*runs = r;
	return 1;
}

int64_t hs_thread_cpu(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
