#!/usr/bin/env bash
# Hint pages on a measuring machine without Go: the agent's cost with
# --hints (the ping-pong pair alone, then beside a busy loop on its CPU)
# and the end-to-end test (estimate error, switch-in-to-visible delay,
# whether the reader got its target's live array). The ping-pong pair
# reads its page as an application would, so it holds its live array
# (docs/hints.md "Live blocks in a BPF map"). Needs root and curl;
# bpftool optional (BPF time). ~2 minutes.
#
#   go build -o DIR/vgpu-probe ./cmd/vgpu-probe
#   go test -c -o DIR/monitor.test ./agent/monitor
#   go test -c -o DIR/hints.test ./agent/hints
#   sudo BIN=DIR agent/perf/hints-cost.sh [SECONDS]
set -euo pipefail
dir=${BIN:-build/agent-bench}
secs=${1:-8}
here=$(cd "$(dirname "$0")" && pwd)
cpu=$(( $(nproc) - 1 ))
echo "== kernel: $(uname -r), $(nproc) CPUs"
echo "lockdown: $(cat /sys/kernel/security/lockdown 2>/dev/null || dmesg 2>/dev/null | grep -o 'Kernel is locked down.*' | head -1 || echo unknown)"
hints=$(mktemp -d)
co=
trap 'rm -rf "$hints"; [ -n "$co" ] && kill $co 2>/dev/null || true' EXIT
# The agent says so when it cannot make live arrays; the socket shows it can.
timeout 3 "$dir/vgpu-probe" agent --pid $$ --hints "$hints" --listen 127.0.0.1:19478 2>&1 | grep -iE 'hint pages' | head -2 || true
echo "live array socket: $(find "$hints" -maxdepth 1 -name '*.sock' | wc -l) (0 after the agent exits: it removes it)"
echo "== agent cost, pair alone"
BIN=$dir bash "$here/agent-cost.sh" "$secs" 30 --hints "$hints"
echo "== agent cost, pair beside a busy loop on CPU $cpu"
taskset -c "$cpu" sh -c 'while :; do :; done' & co=$!
BIN=$dir bash "$here/agent-cost.sh" "$secs" 30 --hints "$hints"
kill $co; co=
echo "== end-to-end (VGPU_PROBE_HINTS_SECONDS=$secs)"
VGPU_PROBE_HINTS_SECONDS=$secs "$dir/hints.test" -test.run EndToEnd -test.v -test.count=1 2>&1 | grep -E 'e2e_test|^(---|PASS|FAIL|ok)'
