#!/usr/bin/env bash
# A GROMACS-like OpenMP program (libhybridsync/testdata/programs/ompsteps.c:
# per step, parallel regions of CPU work across N threads, then the master
# launches a kernel and waits while the others wait at the OpenMP runtime)
# on N CPUs, each shared with a `while(1)` loop, under CUDA's default wait,
# its blocking-sync mode, the library preloaded, and OpenMP's wait settings.
# Arms rotate in every repetition; one JSON line per run on stdout, then
# the medians per arm and their ratios to cuda-default (paired by
# repetition) on stderr.
#
#   experiments/apps/diag/ompsteps.sh [REPS] [-- OMPSTEPS ARGS...]      # on the GPU machine (nvcc)
#   STANDIN=1 experiments/apps/diag/ompsteps.sh [REPS] [-- ARGS...]     # anywhere: the CUDA stand-in (gcc)
#
# e.g. THREADS=4 RUN_S=4 experiments/apps/diag/ompsteps.sh 10 -- --serial-us 25000
# (a serial part longer than libgomp's spin every 100 steps, as GROMACS's
# pair search has). A spinning team's phase against the busy loops is a
# coin flip per run (in step: about twice the time alone; out of step: a
# scheduler tick per hand-over), so compare medians of many runs, and read
# the library's stats: beside the spinning team it should show "team"
# reports and no explorations (docs/tried.md, "Blocking beside a spinning
# OpenMP team").
#
# THREADS (default 4): threads and CPUs (the last THREADS CPUs). RUN_S
# (default 4): each run's length. ARMS (default: all of cuda-default,
# cuda-blocking, block-event, hybridsync, hybridsync-spin1000, spin1000,
# passive): hybridsync* preload LIB (default build/device/lib/libhybridsync.so,
# with STANDIN=1 build/lib/libhybridsync.so, from `make lib`);
# block-event makes every event wait sleep (cudaEventBlockingSync);
# spin1000 and passive are GOMP_SPINCOUNT=1000 and OMP_WAIT_POLICY=PASSIVE;
# hybridsync:FILE preloads another build of the library (FILE, or the file
# of that name beside LIB).
# ALONE=1: no busy loops. Each hybridsync run's stats file goes to
# $OUT (default ./device-out)/ompsteps-stats-ARM-REP.json, the runs to
# $OUT/ompsteps-runs.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
REPS=${1:-5}
[ $# -gt 0 ] && shift
[ "${1:-}" = -- ] && shift
THREADS=${THREADS:-4}
SECONDS_EACH=${RUN_S:-4}
ARMS=${ARMS:-cuda-default,cuda-blocking,block-event,hybridsync,hybridsync-spin1000,spin1000,passive}
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT"
W=$(mktemp -d)
LOOPS=()
cleanup() {
	for p in "${LOOPS[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$W"
}
trap cleanup EXIT
SRC=libhybridsync/testdata/programs/ompsteps.c
if [ -n "${STANDIN:-}" ]; then
	LIB=${LIB:-$ROOT/build/lib/libhybridsync.so}
	S=libhybridsync/testdata/standin
	gcc -O2 -shared -fPIC -o "$W/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$S/cuda.c" -lpthread
	gcc -O2 -shared -fPIC -o "$W/libcudart.so.13" -Wl,-soname,libcudart.so.13 "$S/cudart.c" -ldl -lpthread
	ln -s libcudart.so.13 "$W/libcudart.so"
	gcc -O2 -fopenmp -o "$W/ompsteps" "$SRC" -L"$W" -lcudart -ldl
	export LD_LIBRARY_PATH=$W${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
	LIB=${LIB:-$ROOT/build/device/lib/libhybridsync.so}
	NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	"$NVCC" -O2 -x cu -arch=native -Xcompiler -fopenmp -o "$W/ompsteps" "$SRC" 2>/dev/null ||
		"$NVCC" -O2 -x cu -arch=sm_90 -Xcompiler -fopenmp -o "$W/ompsteps" "$SRC"
fi
case ,$ARMS, in *,hybridsync,* | *,hybridsync-spin1000,*) [ -f "$LIB" ] || { echo "ompsteps.sh: $LIB missing" >&2; exit 2; } ;; esac
NCPU=$(nproc)
[ "$THREADS" -le "$NCPU" ] || { echo "ompsteps.sh: THREADS=$THREADS > $NCPU CPUs" >&2; exit 2; }
CPUS=$(seq -s, $((NCPU - THREADS)) $((NCPU - 1)))
if [ -z "${ALONE:-}" ]; then
	for c in ${CPUS//,/ }; do
		taskset -c "$c" sh -c 'while :; do :; done' &
		LOOPS+=($!)
	done
	sleep 0.3
fi
IFS=, read -ra A <<<"$ARMS"
{
	echo "# $(date -u) $(uname -r) cpus=$CPUS threads=$THREADS alone=${ALONE:-0} standin=${STANDIN:-0} args=$*"
	lscpu | grep -E 'Model name' || true
	if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true; fi
} >"$OUT/ompsteps-machine.txt" 2>&1
for rep in $(seq "$REPS"); do
	for i in "${!A[@]}"; do
		arm=${A[$(((i + rep) % ${#A[@]}))]}
		env=(OMP_NUM_THREADS="$THREADS")
		args=()
		stats=$OUT/ompsteps-stats-${arm//[^A-Za-z0-9._-]/_}-$rep.json
		case $arm in
		cuda-default) ;;
		cuda-blocking) args=(--blocking-sync) ;;
		block-event) args=(--blocking-event) ;;
		hybridsync) env+=(LD_PRELOAD="$LIB" HYBRIDSYNC_STATS="$stats") ;;
		hybridsync-spin1000) env+=(LD_PRELOAD="$LIB" HYBRIDSYNC_STATS="$stats" GOMP_SPINCOUNT=1000) ;;
		hybridsync:*)
			f=${arm#hybridsync:}
			[[ $f == */* ]] || f=$(dirname "$LIB")/$f
			env+=(LD_PRELOAD="$f" HYBRIDSYNC_STATS="$stats")
			;;
		spin1000) env+=(GOMP_SPINCOUNT=1000) ;;
		passive) env+=(OMP_WAIT_POLICY=PASSIVE) ;;
		*) echo "ompsteps.sh: unknown arm $arm" >&2; exit 2 ;;
		esac
		line=$(env "${env[@]}" taskset -c "$CPUS" "$W/ompsteps" --seconds "$SECONDS_EACH" "${args[@]}" "$@")
		echo "{\"arm\":\"$arm\",\"rep\":$rep,${line#\{}"
	done
done | tee "$OUT/ompsteps-runs.jsonl"
python3 - "$OUT/ompsteps-runs.jsonl" <<'EOF' >&2
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in runs:
    by.setdefault(r["arm"], {})[r["rep"]] = r
ref = by.get("cuda-default", {})
print("%-20s %10s %10s %10s %12s" % ("arm", "step_us", "p50_us", "p90_us", "vs default"))
for arm, reps in by.items():
    med = lambda k: statistics.median(r[k] for r in reps.values())
    paired = [reps[k]["step_us"] / ref[k]["step_us"] for k in reps if k in ref]
    print("%-20s %10.0f %10.0f %10.0f %12s" % (arm, med("step_us"), med("p50_us"), med("p90_us"),
          "%.2fx" % statistics.median(paired) if paired else "-"))
EOF
