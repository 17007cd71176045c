#!/usr/bin/env bash
# The agent's cost, measured on the real process: `vgpu-probe agent --pid`
# (the default trace schedule, unless the flags say otherwise) watching a
# ping-pong pair (two threads of one process handing a byte over
# pipes on the last CPU, each spinning SPIN_US µs per hand-off: 30 gives
# ~30k switches/s, 0 as many as the kernel can), scraped every SCRAPE_EVERY
# seconds like Prometheus. Prints the agent's CPU (utime+stime of its
# process; and exact, from its threads' schedstat run time: a tick of
# utime+stime is 0.1-0.2% of a short run) and the CPU spent in BPF
# programs (kernel.bpf_stats_enabled, summed by bpftool over every
# program loaded on the host), in % of one core. Needs root, bpftool and
# curl.
#
#   make bench-agent-process              # builds, then runs this
#   BIN=dir agent/perf/agent-cost.sh SECONDS SPIN_US [agent flags...]
#
# BIN holds vgpu-probe and monitor.test (`go test -c ./agent/monitor`,
# whose TestMain turns into the ping-pong pair when asked).
set -euo pipefail
dir=${BIN:-build/agent-bench}
secs=$1 spin=$2; shift 2
cpu=$(( $(nproc) - 1 ))
pp='' ag=''
trap 'kill $ag $pp 2>/dev/null || true' EXIT
# With --hints DIR the pair reads its page as an application would
# (and so holds its live array, where the agent has them).
hdir=; prev=
for a in "$@"; do [ "$prev" = --hints ] && hdir=$a; prev=$a; done
VGPU_PROBE_PINGPONG_CPU=$cpu VGPU_PROBE_PINGPONG_CPU_SPIN_US=$spin VGPU_PROBE_PINGPONG_CPU_HINTS=$hdir "$dir/monitor.test" >/dev/null & pp=$!
sleep 0.5
"$dir/vgpu-probe" agent --pid "$pp" --listen 127.0.0.1:19477 "$@" >/dev/null 2>&1 & ag=$!
sleep 2
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# ns on CPU of the agent's threads (those alive at both reads: the Go
# runtime keeps its threads).
runns() { cat "/proc/$1"/task/*/schedstat | awk '{s+=$1} END{print s}'; }
# -1: no bpftool, BPF time not measured.
bpfns() {
	command -v bpftool >/dev/null || { echo -1; return; }
	# No program has run yet (detached between trace windows): no match.
	bpftool prog show | { grep -o 'run_time_ns [0-9]*' || true; } | awk '{s+=$2} END{print s+0}'
}
switches() { cat /proc/$pp/task/*/schedstat | awk '{s+=$3} END{print s}'; }
echo 1 > /proc/sys/kernel/bpf_stats_enabled
b0=$(bpfns); w0=$(switches); t0=$(ticks $ag); r0=$(runns $ag); s0=$(date +%s.%N)
end=$(( $(date +%s) + secs ))
while [ "$(date +%s)" -lt "$end" ]; do curl -s -o /dev/null 127.0.0.1:19477/metrics 2>/dev/null || true; sleep "${SCRAPE_EVERY:-1}"; done
t1=$(ticks $ag); r1=$(runns $ag); s1=$(date +%s.%N); b1=$(bpfns); w1=$(switches)
echo 0 > /proc/sys/kernel/bpf_stats_enabled
awk -v t=$((t1-t0)) -v r=$((r1-r0)) -v hz="$(getconf CLK_TCK)" -v s0="$s0" -v s1="$s1" -v b="$( [ "$b0" -ge 0 ] && echo $((b1-b0)) || echo -1)" -v sw=$((w1-w0)) \
  'BEGIN{w=s1-s0; bpf = b < 0 ? "n/a (no bpftool)" : sprintf("%.3f%%", 100*b/1e9/w); printf "wall %.1fs  watched switches/s %.0f  agent-cpu %.3f%% (exact %.3f%%)  bpf-cpu %s of one core (all BPF programs on the host)\n", w, sw/w, 100*t/hz/w, 100*r/1e9/w, bpf}'
