#!/usr/bin/env bash
# Hint pages on a measuring machine without Go: the agent's cost with
# --hints (the ping-pong pair alone, then beside a busy loop on its CPU)
# and the end-to-end test (estimate error, switch-in-to-page delay). It
# also says whether this kernel lets the BPF programs write the pages
# themselves (kprobes, and no lockdown forbidding bpf_probe_write_user):
# where it does not, the agent writes every switch-in from user space as
# before. Needs root and curl; bpftool optional (BPF time). ~2 minutes.
#
#   go build -o DIR/vgpu-probe ./cmd/vgpu-probe
#   go test -c -o DIR/monitor.test ./agent/monitor
#   go test -c -o DIR/hints.test ./agent/hints
#   sudo BIN=DIR agent/bench-hints-device.sh [SECONDS]
set -euo pipefail
dir=${BIN:-build/agent-bench}
secs=${1:-8}
here=$(cd "$(dirname "$0")" && pwd)
cpu=$(( $(nproc) - 1 ))
echo "== kernel: $(uname -r), $(nproc) CPUs"
echo "lockdown: $(cat /sys/kernel/security/lockdown 2>/dev/null || dmesg 2>/dev/null | grep -o 'Kernel is locked down.*' | head -1 || echo unknown)"
echo "kprobes: $( [ -e /sys/bus/event_source/devices/kprobe ] && echo yes || echo 'no (CONFIG_KPROBES unset?)')"
echo "finish_task_switch: $(grep -oE ' finish_task_switch(\.[a-z0-9.]+)?$' /proc/kallsyms | head -1 || echo missing)"
hints=$(mktemp -d)
co=
trap 'rm -rf "$hints"; [ -n "$co" ] && kill $co 2>/dev/null || true' EXIT
# The agent's own log says who writes the live blocks.
timeout 3 "$dir/vgpu-probe" agent --pid $$ --hints "$hints" --listen 127.0.0.1:19478 2>&1 | grep -iE 'hint pages' | head -2 || true
echo "== agent cost, pair alone"
BIN=$dir bash "$here/bench-agent.sh" "$secs" 30 --hints "$hints"
echo "== agent cost, pair beside a busy loop on CPU $cpu"
taskset -c "$cpu" sh -c 'while :; do :; done' & co=$!
BIN=$dir bash "$here/bench-agent.sh" "$secs" 30 --hints "$hints"
kill $co; co=
echo "== end-to-end (VGPU_PROBE_HINTS_SECONDS=$secs)"
VGPU_PROBE_HINTS_SECONDS=$secs "$dir/hints.test" -test.run EndToEnd -test.v -test.count=1 2>&1 | grep -E 'e2e_test|^(---|PASS|FAIL|ok)'
