// Package crossing measures what a call between C and Go costs the
// library's wait path (its benchmarks; docs/architecture.md, "One wait",
// says which way each crossing goes and how often). A call from C into Go
// is made from a thread C created, as a program's thread that waits is.
package crossing

/*
#cgo CFLAGS: -O2 -Wall -std=gnu11
#cgo LDFLAGS: -lpthread
#include <stdint.h>
int crossing_nop(void);
int crossing_from_c(long n, int64_t gap_ns, int64_t *ns, long *switches);
int crossing_in_c(long n, int64_t gap_ns, int64_t *ns, long *switches);
*/
import "C"

//export crossingGo
func crossingGo() C.int { return 1 }

// IntoC makes n calls from Go to an empty C function.
func IntoC(n int) {
	for range n {
		C.crossing_nop()
	}
}

// FromC makes n calls from a C thread into an empty Go function, each
// after gap ns of work in C, and returns the ns spent in the calls and the
// context switches of the whole process (every thread) meanwhile.
func FromC(n int, gap int64) (ns int64, switches int64) {
	var t C.int64_t
	var s C.long
	C.crossing_from_c(C.long(n), C.int64_t(gap), &t, &s)
	return int64(t), int64(s)
}

// InC is FromC with an empty C function in place of the Go one: the
// baseline of the clock reads and the loop.
func InC(n int, gap int64) (ns int64, switches int64) {
	var t C.int64_t
	var s C.long
	C.crossing_in_c(C.long(n), C.int64_t(gap), &t, &s)
	return int64(t), int64(s)
}
