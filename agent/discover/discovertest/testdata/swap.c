/* swap A B: exchanges the names A and B (renameat2 RENAME_EXCHANGE, one
 * atomic step) as fast as it can, forever, as a user who may rename them
 * races a check of a path that goes through one of them. Prints "ready"
 * after the first exchange. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 3)
		return 2;
	if (renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) != 0) {
		perror("renameat2");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE);
}
