/* GNU libgomp's spin count, set while the program runs: see gompspin.h.
 *
 * libgomp has no call that changes how long its threads spin at a barrier
 * before they sleep: it copies GOMP_SPINCOUNT into a hidden variable in
 * its constructor and reads that variable at every wait (do_spin in its
 * config/linux/wait.h). The variable is in libgomp's writable data, which
 * this process may write: the launcher gives GOMP_SPINCOUNT a marker
 * value, and the word of libgomp's data that holds exactly that value is
 * the spin count. A libgomp that holds it twice, or never, is left alone. */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "gompspin.h"

/* Enough for the system's libgomp and a wheel's own copy (PyTorch's
 * libgomp-HASH.so.1) side by side. */
#define HS_GOMP_MAX 4

int hs_gomp_following;

void hs_gomp_set_following(void) { __atomic_store_n(&hs_gomp_following, 1, __ATOMIC_RELEASE); }

static unsigned long long *words[HS_GOMP_MAX];
static int nwords;

struct locate {
	unsigned long long marker;
	unsigned long long *found[HS_GOMP_MAX];
	int n, ambiguous, libgomp;
	char *name;
	unsigned long len;
};

static int is_libgomp(const char *path)
{
	if (!path || !*path)
		return 0;
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	return strncmp(base, "libgomp", 7) == 0;
}

/* scan returns the one word of [a, e) equal to marker, NULL if none;
 * sets *twice where there are more. */
static unsigned long long *scan(uintptr_t a, uintptr_t e, unsigned long long marker, int *twice)
{
	unsigned long long *hit = NULL;
	for (unsigned long long *p = (void *)((a + 7) & ~(uintptr_t)7); (uintptr_t)(p + 1) <= e; p++) {
		if (*p != marker)
			continue;
		if (hit)
			*twice = 1;
		hit = p;
	}
	return hit;
}

static int each(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct locate *l = arg;
	if (!is_libgomp(info->dlpi_name))
		return 0;
	l->libgomp = 1;
	unsigned long long *hit = NULL;
	int twice = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		unsigned long long *h = scan(a, a + ph->p_memsz, l->marker, &twice);
		if (h && hit)
			twice = 1;
		if (h)
			hit = h;
	}
	if (twice)
		l->ambiguous = 1;
	else if (hit && l->n < HS_GOMP_MAX) {
		if (l->n == 0 && l->name && l->len) {
			strncpy(l->name, info->dlpi_name, l->len - 1);
			l->name[l->len - 1] = 0;
		}
		l->found[l->n++] = hit;
	}
	return 0;
}

int hs_gomp_locate(unsigned long long marker, char *name, unsigned long len)
{
	struct locate l = {.marker = marker, .name = name, .len = len};
	if (name && len)
		name[0] = 0;
	dl_iterate_phdr(each, &l);
	if (l.ambiguous)
		return -1;
	memcpy(words, l.found, sizeof words);
	nwords = l.n;
	return l.n;
}

static int any_libgomp(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	return is_libgomp(info->dlpi_name);
}

int hs_gomp_libgomp(void) { return dl_iterate_phdr(any_libgomp, NULL); }

void hs_gomp_store(unsigned long long v)
{
	for (int i = 0; i < nwords; i++)
		__atomic_store_n(words[i], v, __ATOMIC_RELAXED);
}
