#!/usr/bin/env bash
# One of the suite's in-process programs under each contention setting,
# with arms of your choosing alternated per round inside each process
# (APPS_INPROC_ARMS; loop.h and inproc.py list them), for what the suite's
# three product arms cannot show:
#   cuda-default,hooks-observe,hybridsync   what observing launches and
#       records costs, against the whole library (the default)
#   cuda-default,cuda-default-again,hybridsync   an A/A control: how far
#       two identical arms measure apart, the resolution of the method
#
#   experiments/apps/diag/arms.sh PROGRAM [ROUNDS [ARMS]]   # on the GPU machine, as root (cgroup v2)
#
# PROGRAM: launch_bound or mixed_static (built here with nvcc), or
# torch_infer, torch_train, cupy_stencil (through inproc.py). PROCS=N runs
# N processes per setting (default 1). Needs build/device/lib/libhybridsync.so
# (experiments/apps/run.sh prepare). Appends each round of each arm to
# $OUT/runs.jsonl as vgpu-probe apps writes its runs (the process as the
# repetition), the library's stats beside it; `vgpu-probe report
# $OUT/runs.jsonl` pairs every arm with cuda-default by round.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PROG=${1:?usage: arms.sh PROGRAM [ROUNDS [ARMS]]}
ROUNDS=${2:-24}
ARMS=${3:-cuda-default,hooks-observe,hybridsync}
PROCS=${PROCS:-1}
OUT=${OUT:-$PWD/device-out}
LIB=$PWD/build/device/lib/libhybridsync.so
CPU=$(($(nproc) - 1))
CG=/sys/fs/cgroup/apps-arms-$$
mkdir -p build/apps "$OUT"
case $PROG in
launch_bound | mixed_static)
	nvcc -O2 -arch=native -o "build/apps/$PROG" "experiments/apps/$PROG.cu" 2>/dev/null ||
		nvcc -O2 -arch=sm_90 -o "build/apps/$PROG" "experiments/apps/$PROG.cu"
	cmd=("build/apps/$PROG" --inproc "$ROUNDS")
	;;
*) cmd=(python3 experiments/apps/inproc.py "$PROG" --rounds "$ROUNDS") ;;
esac
co=
cleanup() {
	if [ -n "$co" ]; then kill "$co" 2>/dev/null || true; fi
	if [ -d "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
	co=
}
trap cleanup EXIT
# TO_RUNS LINE PROGRAM SETTING REP: the program's result line, a round per
# arm, as runs of vgpu-probe apps.
TO_RUNS='
import json, sys
for r in json.loads(sys.argv[1])["rounds"]:
    print(json.dumps({"program": sys.argv[2], "arm": r["arm"], "contention": sys.argv[3], "rep": int(sys.argv[4]),
                      "round": r["round"] + 1, "steps": r["steps"], "wall_s": r["wall_s"], "cpu_s": r["cpu_s"]}))'
for proc in $(seq "$PROCS"); do
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
			# shellcheck disable=SC2016 # the inner bash expands them: its own pid and arguments
			prefix=(bash -c 'echo $$ >"$0/cgroup.procs"; shift; exec "$@"' "$CG" -)
		fi
		echo "arms: $PROG $setting process $proc" >&2
		line=$(APPS_INPROC_ARMS=$ARMS LD_PRELOAD=$LIB HYBRIDSYNC_STATS="$OUT/$PROG-$setting-$proc.stats.json" \
			"${prefix[@]}" taskset -c "$CPU" "${cmd[@]}")
		python3 -c "$TO_RUNS" "$line" "$PROG" "$setting" "$((proc - 1))" >>"$OUT/runs.jsonl"
		cleanup
	done
done
