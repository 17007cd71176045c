// Package bpfload loads the scheduler programs of package bpf into the
// running kernel, attaches them, and gives the agent typed access to their
// maps and ring buffer: which threads are watched, their counters, who took
// their CPU, and the stream of switch events.
//
// Errors: a kernel that refuses the programs (no BPF, verifier rejection,
// missing tracepoints) yields an error wrapping ErrRefused; missing
// privileges yield one wrapping ErrPermission. Both name the step that
// failed.
package bpfload
