//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// Per-thread scheduling discontinuity of watched threads (vCPU threads,
// or any thread the agent names).
//
// The agent fills `watched` with one zeroed entry per thread id and sets
// the thread's bit in `watched_bits`. The sched_switch and sched_wakeup
// handlers test that bit for every task they see (an inlined array load);
// a thread that is not watched costs exactly that and nothing else. Every number about a watched thread lives in its map value, so the
// agent reads one value per thread.
//
// The agent attaches the programs for a trace window and detaches them in
// between (see agent/monitor): a host pays for them only while they are
// attached. Each attach bumps config.epoch; the first event of a thread in
// a new epoch forgets whatever interval was open when the programs were
// detached, so no interval ever spans a gap they did not see.
//
// Each program exists twice: tp_btf (typed arguments, cheapest, needs BPF
// tracing support in the kernel) and raw_tp (works wherever raw tracepoints
// do). The loader picks one set at run time; both share the handlers below.

#include "vmlinux_min.h"
#include "bpf/bpf_helpers.h"
#include "bpf/bpf_core_read.h"
#include "bpf/bpf_tracing.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// RD reads a kernel field through a task pointer (or one reached from it).
// The tp_btf programs get typed (BTF) pointers and load the field
// directly; raw_tp must call bpf_probe_read_kernel for each, which costs
// more. btf is a constant in each program, so only one branch is built.
#define RD(btf, src, ...) ((btf) ? (src)->__VA_ARGS__ : BPF_CORE_READ(src, __VA_ARGS__))

// Histograms are log2 buckets of nanoseconds with 4 linear sub-buckets per
// power of two (about 19% wide), so a p50 of a 4 ms slice is resolved to
// within a few hundred microseconds. 128 buckets reach 2^32 ns (4.3 s);
// longer intervals land in the last bucket (totals stay exact).
#define HIST_BUCKETS 128
#define TASK_COMM_LEN 16

// Counters of one watched thread. Written by the BPF handlers, read (torn
// reads allowed: each field is a monotonic counter or a timestamp) by the
// agent.
struct thread_stats {
	__u64 switch_in_ns;  // last switch-in (bpf_ktime_get_ns), 0 before the first
	__u64 switch_out_ns; // last switch-out, 0 before the first
	__u64 wake_ns;       // pending wake-up, 0 when none
	__u64 run_ns;        // total time on CPU (closed intervals)
	__u64 offcpu_ns;     // total time off CPU (closed intervals)
	__u64 rq_wait_ns;    // of offcpu_ns, time runnable but not running
	__u64 switches;      // switch-ins
	// switch-outs: on a busy host the tracepoint shows some switch-outs
	// of a thread with no switch-in between (the kernel's own trace of
	// sched_switch has the same gaps), so this is not switches give or
	// take one; a live block is written at each of both (hint_writes).
	__u64 switch_outs;
	__u64 preemptions;   // switch-outs while still runnable (involuntary)
	__u64 wakeups;
	__u64 throttles;     // switch-outs while runnable to the idle task: bandwidth throttling
	__u64 run_since_throttle_ns; // on-CPU time since the last throttle
	__u32 on_cpu;        // 1 between switch-in and switch-out
	__u32 cpu;           // CPU of the last switch-in
	__u32 out_preempted; // last switch-out was involuntary
	__u32 replacer_tgid; // tgid that took the CPU at the last involuntary switch-out
	__u32 in_throttle;   // a throttle was counted and the runqueue is not yet unthrottled
	__u32 out_throttled; // last switch-out was a throttle
	__u32 epoch;         // config.epoch of the open-interval fields above
	__u32 quota_armed;   // a throttle was seen in this epoch: the next one closes a quota interval
	__u64 last_run_ns;   // length of the last on-CPU interval
	__u64 contended_ns;  // last switch-in after an involuntary interval of QUIET_OFF_NS or more (0: none)
	__u64 woke_ns;       // last switch-in whose record woke the reader (0: none)
	// CPU bandwidth control, read from the kernel at the last switch-in
	// (quota_ns 0: no cgroup above the thread has a quota, or the kernel
	// lacks the fields). Of the cgroups above it with a quota, the one
	// with the least runtime left: what it could still use of its quota
	// in the current period (the runtime its runqueue on this CPU holds
	// plus the group's pool; negative: overdrawn), its quota and period,
	// and when its period timer next refills the pool (CLOCK_MONOTONIC;
	// in the past while the timer is idle).
	__s64 quota_left_ns;
	__u64 quota_ns;
	__u64 quota_period_ns;
	__u64 quota_refill_ns;
	// The thread's hint_slots entry, copied here when config.hint_gen
	// was hint_gen (hint_target 0: none), so that its switches need not
	// look it up (see hint_block_of); and how many live blocks the
	// programs wrote for it.
	__u32 hint_gen;
	__u32 hint_target;
	__u32 hint_slot;
	__u32 _pad_hint;
	__u64 hint_writes;
	// The kernel's own counters of the thread (what /proc's schedstat and
	// status show), read at its last switch-out, as it exited (exit_ns 0:
	// not seen exiting). /proc forgets a thread once it is reaped, and the
	// intervals above miss one the thread was in when it became watched.
	__u64 exit_ns;
	__u64 exit_run_ns;
	__u64 exit_run_delay_ns;
	__u64 exit_timeslices;
	__u64 exit_voluntary;
	__u64 exit_involuntary;
	char replacer_comm[TASK_COMM_LEN];
	__u64 run_hist[HIST_BUCKETS];    // every on-CPU interval
	__u64 slice_hist[HIST_BUCKETS];  // on-CPU intervals that ended in a preemption
	__u64 offcpu_hist[HIST_BUCKETS]; // every off-CPU interval
	__u64 wake_hist[HIST_BUCKETS];   // wake-up to switch-in
	__u64 quota_run_hist[HIST_BUCKETS]; // on-CPU time between two throttles: the quota in use
};

// Who took the CPU from a watched thread: keyed by (watched tid, tgid of
// the task that ran instead). tgid 0 is the idle task, i.e. the thread was
// throttled by CPU bandwidth control and nothing else wanted the CPU.
struct corunner_key {
	__u32 tid;
	__u32 tgid;
};

struct corunner_val {
	__u64 count;       // involuntary switch-outs to this tgid
	__u64 waited_ns;   // runnable time of the watched thread that followed
	char comm[TASK_COMM_LEN];
};

// One record per off-CPU interval of a watched thread, sent when it ends
// (at switch-in): the thread left the CPU at in_ns - off_ns after running
// run_ns, and came back at in_ns. One record per cycle instead of one per
// switch halves what the agent reads. A thread whose live block goes to its
// target's array sends only the records its estimator learns from (see
// emit).
struct switch_event {
	__u64 in_ns;      // switch-in, bpf_ktime_get_ns (CLOCK_MONOTONIC)
	__u64 off_ns;     // the off-CPU interval that ended (0: unknown, the first after watching)
	__u64 run_ns;     // the on-CPU interval before it (0: unknown)
	__u32 tid;
	__u32 tgid;
	__u32 cpu;        // CPU it was switched in on
	__u32 other_tgid; // who took the CPU at the switch-out, if preempted (0 and "" otherwise)
	__u8 preempted;   // the switch-out was involuntary
	__u8 throttled;   // ... because the bandwidth quota ran out
	__u8 waited;      // the interval ended with a runnable wait (preempted, or woken and waiting)
	__u8 woken;       // the record woke the reader (with config.wakeup; see emit)
	__u8 _pad[4];
	char other_comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	// Entries are ~5 KiB: allocate them as the agent watches threads
	// instead of reserving 20 MiB of kernel memory up front.
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct thread_stats);
} watched SEC(".maps");

// One bit per thread id, set by the agent for every watched thread: the
// first check of every context switch on the host. An array lookup is
// inlined by the verifier, so a thread that is not watched costs a load
// and a bit test instead of a hash lookup. 2^22 bits cover the largest
// pid_max; a tid beyond it falls through to the hash lookup.
#define WATCH_WORDS (1 << 16)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WATCH_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} watched_bits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct corunner_key);
	__type(value, struct corunner_val);
} corunners SEC(".maps");

// 1 MiB: 64-byte records (plus an 8-byte header) make ~14.5k records, far
// more than arrive between two drains of the agent's reader; beyond that
// records are dropped and counted, never queued without bound.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

// Wake the agent's reader only once this much is waiting. Waking it for
// every record would make the agent a co-runner of the threads it watches
// (each wake-up can preempt a watched thread, which makes a record, which
// wakes the reader...); below the mark the reader drains on its own timer.
#define WAKEUP_BYTES (256 << 10)

// An involuntary off-CPU interval shorter than this (a wake-up preemption
// by a short task, such as the agent's own reader) does not wake the
// reader even when config.wakeup asks for a wake-up per record.
#define QUIET_OFF_NS 100000

// A thread whose last involuntary interval (of QUIET_OFF_NS or more) ended
// longer ago than this has its CPU to itself: its hint says no slice ends
// (the publisher's contendedFor), whatever the time of its switch-in, so
// that switch-in wakes nobody either: waking the reader for every
// switch-in costs the agent CPU at every switch of a watched thread, however
// fast it switches (docs/tried.md: "Waking the reader for every switch-in").
#define CONTENDED_NS 500000000ULL

// Only a switch-in after an involuntary switch-out (the co-runner's turn
// is over: a slice begins) wakes the reader, and at most once per
// WAKE_EVERY_NS for a thread; the others are read with the next record
// that does. Each wake-up is a cross-CPU one charged to the watched
// thread's CPU, and a VM's vCPU that halts and wakes with its guest's
// blocking waits switches in thousands of times a second: woken for
// each, the hint page slowed a TCG guest's blocking waits measurably
// (docs/BENCHMARKS.md, "Table II in real VMs"). The page then shows an
// earlier switch-in, which a reader of it takes as less slice left,
// never more.
#define WAKE_EVERY_NS 1000000ULL

// Index 0: records dropped because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

// Set by the agent before each attach.
struct trace_config {
	__u32 events; // 1: emit ring buffer records; 0: counters only
	__u32 epoch;  // bumped at every attach
	__u32 wakeup; // 1: wake the reader at every record (the hint publisher needs each switch-in at once)
	__u32 self_tgid; // the reader's process: its preemptions of a watched thread are not contention (0: none)
	__u32 hint_gen;  // bumped by the agent at every change of hint_slots (never 0 once loaded)
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct trace_config);
} config SEC(".maps");

// Hint pages (agent/hints, docs/hints.md "Live blocks in a BPF map"):
// the live block of a watched thread's slot, written here at each of its
// switch-outs and switch-ins into a memory-mappable array that belongs to
// the thread's target alone. The agent creates one such array per local
// target (hint_maps, keyed by a target id it picks) and registers each
// thread's target and slot in hint_slots; the target's own processes map
// their array read-only (the agent hands them its fd over a unix socket).
// Direct stores into map memory: no helper, allowed under lockdown.

// One live block, at offset 64 * slot of the target's array: the same
// layout as the live block of a page slot (hintpage), plus the tid.
struct hint_block {
	__u32 seq;          // seqlock: odd while being written
	__u32 word;         // state | flags << 8 | cpu << 16
	__u64 switch_in_ns;
	__u64 switch_out_ns;
	__u64 quota_end_ns;
	__u32 tid;          // the thread that wrote it
	__u32 _pad[7];
};

// The per-target arrays: created by the agent with their own size
// (BPF_F_INNER_MAP), mappable (BPF_F_MMAPABLE). This one is the template.
struct hint_array {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__type(key, __u32);
	__type(value, struct hint_block);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 1024);
	__type(key, __u32); // target id
	__array(values, struct hint_array);
} hint_maps SEC(".maps");

struct hint_slot {
	__u32 target; // key in hint_maps (never 0)
	__u32 slot;   // index in the target's array
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, __u32); // tid
	__type(value, struct hint_slot);
} hint_slots SEC(".maps");

#define HINT_RUNNING 1
#define HINT_PREEMPTED 2
#define HINT_SLEEPING 3
#define HINT_LIVE_KERNEL 1

// Force BTF for the types the Go side reads (bpf2go -type).
const struct hint_slot *unused_hint_slot __attribute__((unused));
const struct hint_block *unused_hint_block __attribute__((unused));
const struct switch_event *unused_switch_event __attribute__((unused));
const struct thread_stats *unused_thread_stats __attribute__((unused));
const struct corunner_key *unused_corunner_key __attribute__((unused));
const struct corunner_val *unused_corunner_val __attribute__((unused));
const struct trace_config *unused_trace_config __attribute__((unused));

static __always_inline bool maybe_watched(__u32 tid)
{
	__u32 idx = tid >> 6;
	if (idx >= WATCH_WORDS)
		return true;
	__u64 *w = bpf_map_lookup_elem(&watched_bits, &idx);
	return !w || ((*w >> (tid & 63)) & 1);
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, s;
	s = (v > 0xFFFFFFFFULL) << 5; v >>= s; r |= s;
	s = (v > 0xFFFF) << 4; v >>= s; r |= s;
	s = (v > 0xFF) << 3; v >>= s; r |= s;
	s = (v > 0xF) << 2; v >>= s; r |= s;
	s = (v > 0x3) << 1; v >>= s; r |= s;
	r |= (v >> 1);
	return r;
}

// Bucket of v: values below 4 are their own bucket; otherwise
// 4*log2(v) + the next two bits. Must match agent/model.BucketBounds.
static __always_inline __u32 hist_bucket(__u64 v)
{
	if (v < 4)
		return (__u32)v;
	__u32 msb = log2_u64(v);
	__u32 idx = (msb << 2) | ((v >> (msb - 2)) & 3);
	if (idx >= HIST_BUCKETS)
		idx = HIST_BUCKETS - 1;
	return idx;
}

static __always_inline void hist_add(__u64 *hist, __u64 v)
{
	// The mask keeps the verifier convinced the index is in bounds.
	__u32 idx = hist_bucket(v) & (HIST_BUCKETS - 1);
	hist[idx]++;
}

static __always_inline long task_state(struct task_struct *t, bool btf)
{
	if (bpf_core_field_exists(t->__state))
		return RD(btf, t, __state);
	struct task_struct___pre514 *old = (void *)t;
	return RD(btf, old, state);
}

// TASK_DEAD is the state of a task's last switch-out, in do_task_dead.
#define TASK_DEAD 0x80

// record_exit copies the kernel's counters of a task switching out for the
// last time: __schedule has by then charged its run time (update_curr)
// and counted this switch in nvcsw or nivcsw, and no later arrival can
// change run_delay or pcount.
static __always_inline void record_exit(struct thread_stats *s, struct task_struct *t, bool btf, __u64 now)
{
	s->exit_run_ns = RD(btf, t, se.sum_exec_runtime);
	if (bpf_core_field_exists(t->sched_info)) {
		s->exit_run_delay_ns = RD(btf, t, sched_info.run_delay);
		s->exit_timeslices = RD(btf, t, sched_info.pcount);
	}
	s->exit_voluntary = RD(btf, t, nvcsw);
	s->exit_involuntary = RD(btf, t, nivcsw);
	s->exit_ns = now;
}

// rq_throttled reports whether the runqueue a task is queued on, or one of
// its ancestors, is throttled because its cgroup ran out of CPU bandwidth
// quota; -1 on kernels without the group-scheduling fields.
static __always_inline int rq_throttled(struct task_struct *t, bool btf)
{
	if (bpf_core_field_exists(t->se.cfs_rq) &&
	    bpf_core_field_exists(((struct cfs_rq *)0)->throttle_count)) {
		struct cfs_rq *rq = RD(btf, t, se.cfs_rq);
		if (rq)
			return RD(btf, rq, throttle_count) > 0;
	}
	return -1;
}

// watched_stats returns the entry of a watched thread, bringing it into the
// current epoch: an interval that was open when the programs were last
// detached ended unseen, so it is dropped rather than measured across the
// gap.
static __always_inline struct thread_stats *watched_stats(__u32 tid, __u32 epoch)
{
	struct thread_stats *s = bpf_map_lookup_elem(&watched, &tid);
	if (s && s->epoch != epoch) {
		s->epoch = epoch;
		s->switch_in_ns = 0;
		s->switch_out_ns = 0;
		s->wake_ns = 0;
		s->on_cpu = 0;
		s->out_preempted = 0;
		s->in_throttle = 0;
		s->quota_armed = 0;
		s->run_since_throttle_ns = 0;
	}
	return s;
}

// How many levels of cgroups above a thread quota_state looks at: the
// thread's own and three ancestors (libvirt puts vCPU threads two levels
// below the domain's cgroup).
#define QUOTA_LEVELS 4
#define RUNTIME_INF (~0ULL)

// quota_state records in s the CPU bandwidth state of the cgroups above
// t at its switch-in: of those with a quota, the one with the least
// runtime left in the current period.
static __always_inline void quota_state(struct thread_stats *s, struct task_struct *t, bool btf)
{
	s->quota_ns = 0;
	if (!bpf_core_field_exists(t->se.cfs_rq) || !bpf_core_field_exists(t->se.parent) ||
	    !bpf_core_field_exists(((struct cfs_rq *)0)->runtime_remaining) ||
	    !bpf_core_field_exists(((struct cfs_rq *)0)->runtime_enabled) ||
	    !bpf_core_field_exists(((struct cfs_rq *)0)->tg) ||
	    !bpf_core_field_exists(((struct task_group *)0)->cfs_bandwidth))
		return;
	struct cfs_rq *rq = RD(btf, t, se.cfs_rq);
	struct sched_entity *se = RD(btf, t, se.parent);
#pragma unroll
	for (int i = 0; i < QUOTA_LEVELS; i++) {
		if (rq && RD(btf, rq, runtime_enabled)) {
			struct task_group *tg = RD(btf, rq, tg);
			__u64 quota = RD(btf, tg, cfs_bandwidth.quota);
			__s64 left = RD(btf, rq, runtime_remaining) +
				     (__s64)RD(btf, tg, cfs_bandwidth.runtime);
			if (quota != RUNTIME_INF && quota != 0 && (s->quota_ns == 0 || left < s->quota_left_ns)) {
				s->quota_left_ns = left;
				s->quota_ns = quota;
				s->quota_period_ns = RD(btf, tg, cfs_bandwidth.period);
				s->quota_refill_ns = RD(btf, tg, cfs_bandwidth.period_timer.node.expires);
			}
		}
		rq = se ? RD(btf, se, cfs_rq) : NULL;
		se = se ? RD(btf, se, parent) : NULL;
	}
}

static __always_inline struct trace_config *get_config(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&config, &zero);
}

// quota_end: when the bandwidth quota binding s's thread runs out if the
// run that began at its switch-in goes on (quota_state at that switch-in):
// the switch-in + the runtime left, or, when the period timer refills the
// pool before that, a whole quota after the refill; 0 when no quota binds
// it (none, or one of a period or more: it spans several CPUs).
// agent/hints kernelQuotaEnd computes the same.
static __always_inline __u64 quota_end(struct thread_stats *s)
{
	__u64 in = s->switch_in_ns;
	if (!s->quota_ns || s->quota_ns >= s->quota_period_ns || !in)
		return 0;
	if (s->quota_left_ns <= 0)
		return in;
	__u64 e = in + (__u64)s->quota_left_ns;
	if (s->quota_refill_ns > in && e > s->quota_refill_ns)
		e = s->quota_refill_ns + s->quota_ns;
	return e;
}

#define WRITE_ONCE32(p, v) (*(volatile __u32 *)&(p) = (v))
#define WRITE_ONCE64(p, v) (*(volatile __u64 *)&(p) = (v))

// hint_block_of returns the live block of tid's slot in its target's
// array, or NULL when it has none. Its registration in hint_slots is
// copied into s and read again only once the agent changed a
// registration (config.hint_gen, bumped after the change): the hash
// lookup of every switch of a watched thread was a tenth of the
// program's time. hint_gen is read before hint_slots, so a copy taken
// under an older generation is taken again at the next switch. A
// registration the agent clears stops the writes from the next switch
// on; the agent waits for a program still inside one (docs/hints.md).
static __always_inline struct hint_block *hint_block_of(const struct trace_config *cfg, __u32 tid,
							 struct thread_stats *s)
{
	__u32 gen = *(volatile __u32 *)&cfg->hint_gen;
	if (s->hint_gen != gen) {
		struct hint_slot *h = bpf_map_lookup_elem(&hint_slots, &tid);
		s->hint_target = h ? h->target : 0;
		s->hint_slot = h ? h->slot : 0;
		s->hint_gen = gen;
	}
	__u32 target = s->hint_target;
	if (!target)
		return NULL;
	void *arr = bpf_map_lookup_elem(&hint_maps, &target);
	if (!arr)
		return NULL;
	__u32 slot = s->hint_slot;
	return bpf_map_lookup_elem(arr, &slot);
}

// hint_write writes the live block of tid's slot, if it has one: seqlock
// odd, body, seqlock even. A thread's switches are serialised (it is
// switched in on one CPU only after its switch-out on another finished),
// so each block has one writer. The stores are volatile, so they are
// emitted in this order, and x86-64 (TSO) makes them visible in program
// order; the agent registers slots only on x86-64 (nothing here orders
// them on weaker machines). Returns whether it wrote.
static __always_inline bool hint_write(const struct trace_config *cfg, __u32 tid, struct thread_stats *s,
				       __u8 state, __u64 out)
{
	struct hint_block *b = hint_block_of(cfg, tid, s);
	if (!b)
		return false;
	__u32 seq = *(volatile __u32 *)&b->seq & ~1U;
	WRITE_ONCE32(b->seq, seq + 1);
	asm volatile("" ::: "memory");
	WRITE_ONCE32(b->word, state | HINT_LIVE_KERNEL << 8 | (s->cpu & 0xffff) << 16);
	WRITE_ONCE64(b->switch_in_ns, s->switch_in_ns);
	WRITE_ONCE64(b->switch_out_ns, out);
	WRITE_ONCE64(b->quota_end_ns, quota_end(s));
	WRITE_ONCE32(b->tid, tid);
	asm volatile("" ::: "memory");
	WRITE_ONCE32(b->seq, seq + 2);
	s->hint_writes++;
	return true;
}

// teaches reports whether the off-CPU interval that a switch-in of s's
// thread ends is one the hint publisher's estimator learns from: a mirror
// of agent/hints learn() (estimate.go), which must change with it. learn()
// takes an interval of known length (off > 0) that ended
//   - a throttle by the bandwidth quota (the last throttle; with a run of
//     minRunNs or more, the throttle's phase in the tick);
//   - a preemption while the CPU went idle (replacer tgid 0): held back by
//     the quota, the last throttle;
//   - a preemption by another process than the publisher's own, off CPU
//     QUIET_OFF_NS or more (the last contention; with a run of minRunNs or
//     more, a sample of the slice).
// Nothing else in a record changes an estimate: the thread's state,
// switch times, CPU and bandwidth state come from its thread_stats, which
// the publisher reads every 20 ms.
static __always_inline bool teaches(const struct trace_config *cfg, const struct thread_stats *s, __u64 off)
{
	if (!off)
		return false;
	if (s->out_throttled)
		return true;
	if (!s->out_preempted)
		return false;
	if (s->replacer_tgid == 0)
		return true;
	// self_tgid 0: the publisher's process is not known here; send it,
	// learn() tells.
	return (!cfg->self_tgid || s->replacer_tgid != cfg->self_tgid) && off >= QUIET_OFF_NS;
}

// emit sends the record of the off-CPU interval a switch-in ends. A
// thread whose live block was just written into its target's array
// (hinted) sends only the records its estimator learns from (teaches):
// nothing reads its other switch-ins but the estimator, which takes them
// from thread_stats. Every other watched thread (vCPUs, the profiler's,
// the agent's without hints) sends one per switch-in.
static __always_inline void emit(const struct trace_config *cfg, struct thread_stats *s, __u64 now,
				 __u64 off, __u32 tid, __u32 tgid, bool waited, bool hinted)
{
	if (!cfg->events)
		return;
	// Preemptions by the reader's own process are not contention:
	// counted, they would keep the reader waking itself.
	bool by_self = cfg->self_tgid && s->replacer_tgid == cfg->self_tgid;
	if (s->out_preempted && off >= QUIET_OFF_NS && !by_self)
		s->contended_ns = now;
	if (hinted && !teaches(cfg, s, off))
		return;
	struct switch_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *d = bpf_map_lookup_elem(&drops, &zero);
		if (d)
			(*d)++; // per-CPU slot: no atomics needed
		return;
	}
	e->in_ns = now;
	e->off_ns = off;
	e->run_ns = s->last_run_ns;
	e->tid = tid;
	e->tgid = tgid;
	e->cpu = bpf_get_smp_processor_id();
	e->preempted = s->out_preempted;
	e->throttled = s->out_throttled;
	e->waited = waited;
	__builtin_memset(e->_pad, 0, sizeof(e->_pad));
	if (s->out_preempted) {
		e->other_tgid = s->replacer_tgid;
		__builtin_memcpy(e->other_comm, s->replacer_comm, TASK_COMM_LEN);
	} else {
		e->other_tgid = 0;
		__builtin_memset(e->other_comm, 0, TASK_COMM_LEN);
	}
	// A switch-in that ends a short involuntary interval wakes nobody:
	// that preemption is often the reader itself, woken onto this CPU by
	// the record before, and waking it again would make it preempt the
	// thread again at once, a loop in which the agent becomes the
	// thread's co-runner. The record is read with the next one.
	bool quiet = s->out_preempted && off > 0 && off < QUIET_OFF_NS;
	bool contended = s->contended_ns && now - s->contended_ns < CONTENDED_NS;
	// A thread whose live block was just written into its target's
	// array needs no reader: its record is read with a later batch.
	bool due = s->out_preempted && now - s->woke_ns >= WAKE_EVERY_NS;
	e->woken = cfg->wakeup && !quiet && contended && !hinted && due;
	if (e->woken)
		s->woke_ns = now;
	__u64 flags = e->woken || bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES ?
			      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

static __always_inline void on_switch(struct task_struct *prev, struct task_struct *next, bool btf)
{
	// At sched_switch `current` is still prev: the helper reads it
	// without a probe read (one less per switch, watched or not).
	__u64 prev_id = bpf_get_current_pid_tgid();
	__u32 prev_tid = (__u32)prev_id;
	__u32 next_tid = RD(btf, next, pid);
	struct thread_stats *s;
	// Read the clock and the config only once a watched thread is
	// involved: most switches on a host are not, and must cost no more
	// than the bit tests.
	__u64 now = 0;

	// pid 0 is the idle task of every CPU: never a watched thread, and
	// the key would collide across CPUs.
	bool prev_w = prev_tid != 0 && maybe_watched(prev_tid);
	bool next_w = next_tid != 0 && maybe_watched(next_tid);
	if (!prev_w && !next_w)
		return;
	struct trace_config *cfg = get_config();
	if (!cfg)
		return;
	__u32 epoch = cfg->epoch;

	if (prev_w) {
		s = watched_stats(prev_tid, epoch);
		if (s) {
			now = bpf_ktime_get_ns();
			// TASK_RUNNING is 0. A task switched out in that state
			// was preempted (or throttled), which is what the
			// kernel counts as nivcsw.
			long state = task_state(prev, btf);
			bool preempted = state == 0;
			if (state & TASK_DEAD)
				record_exit(s, prev, btf, now);
			__u64 ran = 0;
			if (s->switch_in_ns && s->on_cpu) {
				ran = now - s->switch_in_ns;
				s->run_ns += ran;
				hist_add(s->run_hist, ran);
				if (preempted)
					hist_add(s->slice_hist, ran);
			}
			s->run_since_throttle_ns += ran;
			// A runnable task leaves because of the quota when its
			// runqueue is throttled; without the fields to tell, when
			// it leaves the CPU to the idle task (which misses
			// throttles under contention). Since 6.18 a throttled task
			// may run on to its return to user space and be switched
			// out twice in one throttled period: in_throttle counts it
			// once.
			int thr = 0;
			if (preempted && !s->in_throttle) {
				thr = rq_throttled(prev, btf);
				if (thr < 0)
					thr = next_tid == 0;
			}
			if (thr) {
				s->in_throttle = 1;
				s->throttles++;
				// The first throttle of an epoch ends a partial
				// interval (tracing began mid-period): not a sample.
				if (s->quota_armed)
					hist_add(s->quota_run_hist, s->run_since_throttle_ns);
				s->quota_armed = 1;
				s->run_since_throttle_ns = 0;
			}
			s->out_throttled = thr != 0;
			s->last_run_ns = ran;
			s->on_cpu = 0;
			s->switch_out_ns = now;
			s->switch_outs++;
			s->out_preempted = preempted;
			if (preempted) {
				s->preemptions++;
				// A wake-up seen while it was still on CPU is
				// void: its wait starts now.
				s->wake_ns = 0;
				s->replacer_tgid = RD(btf, next, tgid);
				BPF_CORE_READ_STR_INTO(&s->replacer_comm, next, comm);
			}
			hint_write(cfg, prev_tid, s, preempted ? HINT_PREEMPTED : HINT_SLEEPING, now);
		}
	}

	if (next_w) {
		s = watched_stats(next_tid, epoch);
		if (s) {
			if (!now)
				now = bpf_ktime_get_ns();
			__u64 off = 0;
			bool waited = false;
			bool closed = s->switch_out_ns && !s->on_cpu;
			if (closed) {
				off = now - s->switch_out_ns;
				s->offcpu_ns += off;
				hist_add(s->offcpu_hist, off);
			}
			// The wake-up latency needs only the wake-up: a thread
			// asleep when it became watched has no switch-out time
			// yet, but its first wait after waking is still counted.
			if (s->wake_ns) {
				__u64 lat = now - s->wake_ns;
				if (closed && lat > off)
					lat = off;
				s->rq_wait_ns += lat;
				hist_add(s->wake_hist, lat);
				waited = true;
			} else if (closed && s->out_preempted) {
				s->rq_wait_ns += off;
				waited = true;
				struct corunner_key k = {
					.tid = next_tid,
					.tgid = s->replacer_tgid,
				};
				struct corunner_val *c = bpf_map_lookup_elem(&corunners, &k);
				if (c) {
					c->count++;
					c->waited_ns += off;
				} else {
					struct corunner_val nv = { .count = 1, .waited_ns = off };
					__builtin_memcpy(nv.comm, s->replacer_comm, TASK_COMM_LEN);
					bpf_map_update_elem(&corunners, &k, &nv, BPF_NOEXIST);
				}
			}
			if (s->in_throttle && rq_throttled(next, btf) <= 0)
				s->in_throttle = 0;
			s->wake_ns = 0;
			s->on_cpu = 1;
			s->switch_in_ns = now;
			s->switches++;
			s->cpu = bpf_get_smp_processor_id();
			quota_state(s, next, btf);
			bool hinted = hint_write(cfg, next_tid, s, HINT_RUNNING, s->switch_out_ns);
			emit(cfg, s, now, off, next_tid, RD(btf, next, tgid), waited, hinted);
		}
	}
}

static __always_inline void on_wakeup(struct task_struct *p, bool btf)
{
	__u32 tid = RD(btf, p, pid);
	if (tid == 0 || !maybe_watched(tid))
		return;
	struct trace_config *cfg = get_config();
	if (!cfg)
		return;
	struct thread_stats *s = watched_stats(tid, cfg->epoch);
	if (!s)
		return;
	s->wakeups++;
	// A wake-up while still on CPU (woken before it got to sleep) starts
	// no wait.
	if (!s->on_cpu)
		s->wake_ns = bpf_ktime_get_ns();
}

// raw_tp: sched_switch(bool preempt, struct task_struct *prev,
//                      struct task_struct *next, unsigned int prev_state)
SEC("raw_tp/sched_switch")
int BPF_PROG(raw_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(prev, next, false);
	return 0;
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(raw_sched_wakeup, struct task_struct *p)
{
	on_wakeup(p, false);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(raw_sched_wakeup_new, struct task_struct *p)
{
	on_wakeup(p, false);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(btf_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(prev, next, true);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(btf_sched_wakeup, struct task_struct *p)
{
	on_wakeup(p, true);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(btf_sched_wakeup_new, struct task_struct *p)
{
	on_wakeup(p, true);
	return 0;
}
