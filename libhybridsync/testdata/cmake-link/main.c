/* Calls nothing of libhybridsync: the library must be a dependency all the
 * same, loaded at start. */
#include <stdio.h>

int main(void)
{
	puts("unaware");
	return 0;
}
