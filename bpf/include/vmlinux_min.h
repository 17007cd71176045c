/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A hand-written subset of the kernel types sched.bpf.c reads, instead of a
 * multi-megabyte bpftool-generated vmlinux.h. Every struct carries
 * preserve_access_index, so field offsets are relocated against the running
 * kernel's BTF at load time (CO-RE): only the field names and the fact that
 * they exist matter here, not the layout.
 */
#ifndef __VGPU_PROBE_VMLINUX_MIN_H__
#define __VGPU_PROBE_VMLINUX_MIN_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* uapi enum values used by the map definitions (linux/bpf.h). */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_HASH_OF_MAPS = 13,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_F_NO_PREALLOC = 1,
	BPF_F_MMAPABLE = 1 << 10,
	BPF_F_INNER_MAP = 1 << 12,
};

/* bpf_ringbuf_submit flags and bpf_ringbuf_query selectors. */
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_RB_AVAIL_DATA = 0,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

typedef __s64 ktime_t;

struct timerqueue_node {
	ktime_t expires;
} __attribute__((preserve_access_index));

struct hrtimer {
	struct timerqueue_node node;
} __attribute__((preserve_access_index));

/* CONFIG_CFS_BANDWIDTH: a task group's CPU bandwidth limit and the runtime
 * left in its global pool for the current period. */
struct cfs_bandwidth {
	ktime_t period;
	__u64 quota;   /* RUNTIME_INF (~0) when unlimited */
	__u64 runtime; /* left in the pool; refilled by period_timer */
	struct hrtimer period_timer;
} __attribute__((preserve_access_index));

struct task_group {
	struct cfs_bandwidth cfs_bandwidth;
} __attribute__((preserve_access_index));

struct cfs_rq {
	/* CONFIG_CFS_BANDWIDTH: >0 while this runqueue or an ancestor is throttled. */
	int throttle_count;
	/* CONFIG_CFS_BANDWIDTH: this runqueue's group has a quota, and the
	 * runtime it holds locally (taken from the pool in slices). */
	int runtime_enabled;
	__s64 runtime_remaining;
	struct task_group *tg;
} __attribute__((preserve_access_index));

/* CONFIG_FAIR_GROUP_SCHED: the runqueue the entity is queued on, and the
 * entity of the group that owns that runqueue (NULL at the root). */
struct sched_entity {
	struct cfs_rq *cfs_rq;
	struct sched_entity *parent;
	__u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct sched_info {
	unsigned long pcount;
	unsigned long long run_delay;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int __state; /* since 5.14 */
	struct sched_entity se;
	struct sched_info sched_info;
	unsigned long nvcsw;
	unsigned long nivcsw;
	int pid;
	int tgid;
	char comm[16];
} __attribute__((preserve_access_index));

/* Kernels before 5.14 called the field "state" (and it was a long). */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

#endif
