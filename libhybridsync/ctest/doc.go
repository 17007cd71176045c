// Package ctest tests libhybridsync as C programs use it: the tests build
// the library (make -f libhybridsync/Makefile.inc install), a CUDA stand-in driver
// and runtime (testdata/standin), and C programs (testdata/programs) with
// gcc, link them against the .so and the .a, and run them: the explicit
// API, LD_PRELOAD through the runtime and the driver (cuGetProcAddress)
// paths, threads, fork, a program's own SIGALRM handler, the stats JSON,
// pkg-config and a CMake consumer.
package ctest
