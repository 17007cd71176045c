// Package suite runs the application suite: each program of a suite
// file (or one command) in each arm, in each contention setting (alone
// on N CPUs, beside a busy loop pinned to each, the loops there from the
// start, from the program's ready line, or coming and going), over
// repetitions whose order of arms rotates; each run in a child of this
// binary (reexec's "apps-exec") whose program is timed from its start
// and, where it prints one, from its result line. It writes the runs
// (runs.jsonl) and the results document report reads, and finds the
// parts a way needs beside the binary (FindParts). `vgpu-probe apps` is
// its command; package advise runs one program through it.
package suite
