/* GNU libgomp's spin count, found and set while the program runs
 * (gompspin.c; the decision: hybridsync/openmp/ompfollow.go). A leaf: the
 * loader's list of objects only. */
#ifndef HS_GOMPSPIN_H
#define HS_GOMPSPIN_H

#pragma GCC visibility push(hidden)

/* hs_gomp_locate looks, in the writable segments of every loaded object
 * whose file name starts with "libgomp", for the one 8-byte word that
 * holds marker (the GOMP_SPINCOUNT the launcher gave libgomp, which its
 * constructor copied into its spin count). Returns the number of objects
 * whose word it now knows (it keeps them for hs_gomp_store); 0 where no
 * libgomp is loaded or none holds the marker (yet: a libgomp being
 * dlopened has not run its constructor); -1 where a libgomp holds it
 * more than once, so that which word is the spin count is not known.
 * name receives the first such object's path (len bytes with its 0). */
int hs_gomp_locate(unsigned long long marker, char *name, unsigned long len);

/* hs_gomp_libgomp says whether an object named libgomp* is loaded. */
int hs_gomp_libgomp(void);

/* hs_gomp_store sets every located spin count to v. libgomp reads it at
 * each wait, with a relaxed atomic load: an aligned 8-byte store is seen
 * whole by its next wait. */
void hs_gomp_store(unsigned long long v);

/* hs_gomp_following is set once the library follows libgomp's spin
 * (ompfollow.go): the stats file at exit is then written even for a
 * program that made no CUDA wait. A C flag, so that a program that exits
 * before the Go runtime started never waits for it. */
extern int hs_gomp_following;
void hs_gomp_set_following(void);

#pragma GCC visibility pop
#endif
