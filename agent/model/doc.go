// Package model turns the raw per-thread scheduler counters into the
// discontinuity of a vCPU: how long it runs before it loses the CPU, how
// long it stays off, how late it runs after a wake-up, how much of the
// wall time it waits runnable (steal), who takes its CPU, and the expected
// and remaining time slice. It is pure computation on counters, so it is
// tested without a kernel.
//
// It also defines the JSON snapshot the agent serves and prints.
package model
