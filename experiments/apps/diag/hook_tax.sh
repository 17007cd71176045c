#!/usr/bin/env bash
# What each part of libhybridsync costs a launch-bound program under each
# contention setting, inside one process: launch_bound --inproc with the
# arms cuda-default, hooks-observe (launch and record observers only) and
# hybridsync (all hooks), alternated per round (args.h).
# The suite's own table compares only the three product arms; this splits
# the library's arm into its parts.
#
#   experiments/apps/diag/hook_tax.sh [ROUNDS] [PROGRAM]   # on the GPU machine, as root (cgroup v2)
#
# Needs build/device/lib/libhybridsync.so (experiments/apps/run.sh prepare)
# and builds build/apps/PROGRAM (default launch_bound). Writes one JSON line
# per setting to $OUT/hook_tax.jsonl and the library's stats beside it;
# experiments/apps/diag/hook_tax.py prints the table.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-24}
PROG=${2:-launch_bound}
OUT=${OUT:-$PWD/device-out}
LIB=$PWD/build/device/lib/libhybridsync.so
CPU=$(($(nproc) - 1))
CG=/sys/fs/cgroup/hook-tax-$$
mkdir -p build/apps "$OUT"
nvcc -O2 -arch=native -o "build/apps/$PROG" "experiments/apps/$PROG.cu" 2>/dev/null ||
	nvcc -O2 -arch=sm_90 -o "build/apps/$PROG" "experiments/apps/$PROG.cu"
co=
cleanup() {
	[ -n "$co" ] && kill "$co" 2>/dev/null || true
	[ -d "$CG" ] && rmdir "$CG" 2>/dev/null || true
}
trap cleanup EXIT
for setting in none while1 cap cap+while1; do
	if [[ $setting == *while1 ]]; then
		taskset -c "$CPU" bash -c 'while :; do :; done' &
		co=$!
	fi
	prefix=()
	if [[ $setting == cap* ]]; then
		grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
		mkdir "$CG"
		echo "10000 20000" >"$CG/cpu.max"
		prefix=(bash -c 'echo $$ >"$0/cgroup.procs"; shift; exec "$@"' "$CG" -)
	fi
	echo "hook_tax: $PROG $setting" >&2
	line=$(APPS_INPROC_ARMS=cuda-default,hooks-observe,hybridsync LD_PRELOAD=$LIB \
		HYBRIDSYNC_STATS="$OUT/hook_tax-$setting.stats.json" \
		"${prefix[@]}" taskset -c "$CPU" "build/apps/$PROG" --inproc "$ROUNDS")
	echo "{\"setting\":\"$setting\",\"result\":$line}" >>"$OUT/hook_tax.jsonl"
	cleanup
	co=
done
