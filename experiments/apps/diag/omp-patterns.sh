#!/usr/bin/env bash
# OpenMP programs on four shared CPUs under each neighbour pattern, on
# the GPU machine: PyTorch's torch_omp4 (the suite's, libgomp from its
# wheel) on the last four CPUs and, at the same time on four others,
# the barrier-heavy libhybridsync/testdata/programs/ompbarrier.c built
# with gcc (CPU only: the system's libgomp). Arms rotated within every
# repetition, cuda-default-again the A/A control; each program's table
# is `vgpu-probe report $OUT/apps-*/runs.jsonl`.
#
#   experiments/apps/diag/omp-patterns.sh TORCH_SETTINGS OMPBARRIER_SETTINGS [REPS]
#
# e.g. nonex4,while1x4-late nonex4,while1x4-1s (apps' settings; "-" for
# none). Needs build/device (experiments/apps/run.sh prepare) and the
# library installed under build/device/hs (make install-lib
# PREFIX=build/device/hs), carried to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
TORCH=${1:?usage: omp-patterns.sh TORCH_SETTINGS OMPBARRIER_SETTINGS [REPS]}
OMPB=${2:?usage: omp-patterns.sh TORCH_SETTINGS OMPBARRIER_SETTINGS [REPS]}
REPS=${3:-5}
OUT=${OUT:-$PWD/device-out}
ARMS="cuda-default,cuda-default-again,omp-passive,omp-spin1k,hybridsync-run"
LAUNCHER=build/device/hs/bin/hybridsync-run
mkdir -p "$OUT" build/apps
pids=()
if [ "$OMPB" != - ]; then
	pr=libhybridsync/testdata/programs
	cuda=${CUDA_HOME:-/usr/local/cuda}
	# Linked with CUDA's runtime for its symbols only: without
	# OMPBARRIER_CUDA it makes no CUDA call.
	gcc -O2 -fopenmp -I"$pr" -o build/apps/ompbarrier "$pr/ompbarrier.c" -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcudart -lpthread -ldl
	printf '{"programs": [{"name": "ompbarrier", "command": "env OMP_NUM_THREADS=4 ./ompbarrier 6000 8 10 10 200", "cpus": 4}]}\n' >build/apps/ompbarrier.json
	build/device/vgpu-probe apps --suite build/apps/ompbarrier.json --dir build/apps --cpu "${OMPB_CPU:-7}" \
		--lib build/device/lib/libhybridsync.so --launcher "$LAUNCHER" --arms "$ARMS" \
		--contention "$OMPB" --reps "$REPS" --out "$OUT/apps-ompbarrier-$(date -u +%H%M%S)" >"$OUT/ompbarrier.log" 2>&1 &
	pids+=($!)
fi
if [ "$TORCH" != - ]; then
	# One calibration alone for every setting (torch_omp4 times its
	# device part with CUDA events, which a busy neighbour stretches):
	# the passes per batch of a run alone on the same CPUs.
	if [ -z "${APPS_HOST_UNITS:-}" ]; then
		last=$(($(nproc) - 1))
		APPS_HOST_UNITS=$(cd experiments/apps && taskset -c $((last - 3))-$last python3 torch_omp4.py --threads 4 --seconds 1 2>/dev/null |
			python3 -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["host_units"])')
		echo "torch_omp4: APPS_HOST_UNITS=$APPS_HOST_UNITS (calibrated alone)" >&2
	fi
	export APPS_HOST_UNITS
	experiments/apps/run.sh --only torch_omp4 --contention "$TORCH" --arms "$ARMS" --reps "$REPS" --seconds 2 \
		--launcher "$LAUNCHER" >"$OUT/torch.log" 2>&1 &
	pids+=($!)
fi
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
# The per-run stats in one archive: the device machine hands back a
# handful of files, not one per run.
(cd "$OUT" && tar czf stats.tgz apps-*/stats && rm -rf apps-*/stats) || status=1
tail -n 12 "$OUT"/*.log
exit "$status"
