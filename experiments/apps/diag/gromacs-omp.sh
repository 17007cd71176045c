#!/usr/bin/env bash
# GROMACS with several OpenMP threads on shared CPUs: mdrun -ntomp N on
# CPUs 0..N-1, alone and with a busy loop pinned on each of those CPUs
# (a VM whose every vCPU has a busy neighbour), under OpenMP's and CUDA's
# wait settings, the library and its launcher. Arms are rotated within
# every repetition; cuda-default-again is the A/A control.
#
#   experiments/apps/diag/gromacs-omp.sh GMX TPR [REPS [SECONDS [ARMS [SETTINGS]]]]
#
# ARMS (comma separated; default all): cuda-default, cuda-default-again,
#   omp-passive (OMP_WAIT_POLICY=PASSIVE), omp-spinN (GOMP_SPINCOUNT=N, N
#   as 1000 or 10k), cuda-blocking (the blocking-sync shim), hybridsync
#   (the library preloaded), hybridsync-spinN (the library and
#   GOMP_SPINCOUNT=N), hybridsync-run (the launcher: the library and a
#   bounded OpenMP spin), hybridsync-run-live (the launcher with
#   HYBRIDSYNC_OPENMP=live: mdrun's OpenMP on LLVM's libomp, its spin
#   adapted while it runs).
# SETTINGS: alone,busy (default both). NTOMP=N (default 4). Needs
# build/device/lib/libhybridsync.so and build/device/hs/bin/hybridsync-run
# for the library's arms (experiments/apps/run.sh prepare; make install-lib
# PREFIX=build/device/hs). Appends one line per run to $OUT/runs.jsonl as
# vgpu-probe apps writes them (settings nonexN and while1xN; the busy
# loops' share of their CPUs in corunners_share), so that
# `vgpu-probe report $OUT/runs.jsonl` gives the table: per arm the time per
# step, paired with cuda-default by repetition, the A/A control.
set -euo pipefail
cd "$(dirname "$0")/../../.."
GMX=${1:?usage: gromacs-omp.sh GMX TPR [REPS [SECONDS [ARMS [SETTINGS]]]]}
TPR=${2:?usage: gromacs-omp.sh GMX TPR [REPS [SECONDS [ARMS [SETTINGS]]]]}
REPS=${3:-5}
SECONDS_RUN=${4:-8}
ARMS=${5:-cuda-default,cuda-default-again,omp-passive,omp-spin1k,cuda-blocking,hybridsync,hybridsync-run}
SETTINGS=${6:-alone,busy}
NTOMP=${NTOMP:-4}
OUT=${OUT:-$PWD/device-out}
LIB=$PWD/build/device/lib/libhybridsync.so
RUNNER=$PWD/build/device/hs/bin/hybridsync-run
SHIM=$PWD/build/apps/blocksync.so
CPUS=0-$((NTOMP - 1))
mkdir -p "$OUT" build/apps
[ -x "$GMX" ] || { echo "gromacs-omp.sh: $GMX is not an executable gmx" >&2; exit 2; }
[ -f "$TPR" ] || { echo "gromacs-omp.sh: $TPR: no such file (gromacs.py input makes it)" >&2; exit 2; }
[ "$NTOMP" -le "$(nproc)" ] || { echo "gromacs-omp.sh: NTOMP=$NTOMP is more than the $(nproc) CPUs" >&2; exit 2; }
case ,$ARMS, in *,cuda-blocking,*) gcc -shared -fPIC -O2 -o "$SHIM" advise/blocksync/blocksync.c -ldl ;; esac

# count N: a spin count as written in an arm's name (1000, 10k).
count() {
	case $1 in
	*k) echo "$((${1%k} * 1000))" ;;
	*) echo "$1" ;;
	esac
}

# prefix ARM: the command words an arm puts before the program.
prefix() {
	case $1 in
	cuda-default | cuda-default-again) echo env ;;
	omp-passive) echo env OMP_WAIT_POLICY=PASSIVE ;;
	omp-spin*) echo env GOMP_SPINCOUNT="$(count "${1#omp-spin}")" ;;
	cuda-blocking) echo env LD_PRELOAD="$SHIM" ;;
	hybridsync) echo env LD_PRELOAD="$LIB" ;;
	hybridsync-spin*) echo env LD_PRELOAD="$LIB" GOMP_SPINCOUNT="$(count "${1#hybridsync-spin}")" ;;
	hybridsync-run) echo "$RUNNER" ;;
	hybridsync-run-live) echo env HYBRIDSYNC_OPENMP=live "$RUNNER" ;;
	*)
		echo "gromacs-omp.sh: unknown arm $1" >&2
		return 2
		;;
	esac
}

# ticks PIDS...: CPU clock ticks the processes used so far.
ticks() {
	local t=0 p f
	for p in "$@"; do
		read -ra f <"/proc/$p/stat"
		t=$((t + f[13] + f[14]))
	done
	echo "$t"
}

# TO_RUN LINE PROGRAM ARM CONTENTION REP ORDER SHARE: gromacs.py's result
# line as a run of vgpu-probe apps.
TO_RUN='
import json, sys
r = json.loads(sys.argv[1])
r.setdefault("program", sys.argv[2])
r.update(arm=sys.argv[3], contention=sys.argv[4], rep=int(sys.argv[5]), order=int(sys.argv[6]))
if sys.argv[7] != "null":
    r["corunners_share"] = float(sys.argv[7])
print(json.dumps(r, sort_keys=True))'

BUSY=()
stop_busy() {
	[ ${#BUSY[@]} -eq 0 ] || kill "${BUSY[@]}" 2>/dev/null || true
	BUSY=()
}
trap stop_busy EXIT

IFS=, read -ra arms <<<"$ARMS"
IFS=, read -ra settings <<<"$SETTINGS"
for rep in $(seq 1 "$REPS"); do
	for setting in "${settings[@]}"; do
		contention=nonex$NTOMP
		if [ "$setting" = busy ]; then
			contention=while1x$NTOMP
			for c in $(seq 0 $((NTOMP - 1))); do
				taskset -c "$c" sh -c 'while :; do :; done' &
				BUSY+=($!)
			done
		fi
		# Rotate: each repetition starts one arm later.
		n=${#arms[@]}
		for i in $(seq 0 $((n - 1))); do
			arm=${arms[$(((i + rep) % n))]}
			read -ra pre <<<"$(prefix "$arm")"
			t0=$(date +%s.%N)
			b0=0
			[ ${#BUSY[@]} -eq 0 ] || b0=$(ticks "${BUSY[@]}")
			line=$(taskset -c "$CPUS" "${pre[@]}" python3 experiments/apps/gromacs.py mdrun --gmx "$GMX" --tpr "$TPR" \
				--update gpu --ntomp "$NTOMP" --seconds "$SECONDS_RUN" --name "gromacs-ntomp$NTOMP" 2>/dev/null | tail -1) ||
				line='{"error": "mdrun failed", "exit_status": 1}'
			t1=$(date +%s.%N)
			share=null
			if [ ${#BUSY[@]} -gt 0 ]; then
				b1=$(ticks "${BUSY[@]}")
				share=$(python3 -c "import os; print(round(($b1-$b0)/os.sysconf('SC_CLK_TCK')/($t1-$t0)/$NTOMP, 4))")
			fi
			python3 -c "$TO_RUN" "$line" "gromacs-ntomp$NTOMP" "$arm" "$contention" "$rep" "$i" "$share" | tee -a "$OUT/runs.jsonl"
		done
		stop_busy
	done
done
