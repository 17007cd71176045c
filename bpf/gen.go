package bpf

// -target bpfel: the agent runs on little-endian hosts (amd64, arm64); one
// object keeps the committed output small. -type: emit Go types for the
// structs the agent reads from maps and the ring buffer.
//go:generate go tool bpf2go -tags linux -cflags "-O2 -g -Wall -Werror" -target bpfel -type thread_stats -type switch_event -type corunner_key -type corunner_val -type trace_config -type hint_slot -type hint_block Sched sched.bpf.c -- -I./include

// HistBuckets is the number of buckets of every histogram in
// SchedThreadStats (HIST_BUCKETS in sched.bpf.c).
const HistBuckets = 128
