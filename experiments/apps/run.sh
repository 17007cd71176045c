#!/usr/bin/env bash
# The real-application suite: unmodified PyTorch, CuPy and
# nvcc-built programs under CUDA's default wait, CUDA's blocking-sync mode
# and LD_PRELOAD=libhybridsync.so, under CPU contention.
#
#   experiments/apps/run.sh prepare     # here, with Go: build/device/{vgpu-probe,lib/libhybridsync.so}
#   experiments/apps/run.sh [ARGS...]   # on the GPU machine (nvcc, gcc, python3; no Go)
#
# The second form builds the .cu programs and blocksync.so into build/apps,
# then runs `vgpu-probe apps` on experiments/apps/suite.json with ARGS
# passed through (e.g. --only torch_infer --contention none,while1 --reps 5).
# Raw runs and hybridsync stats go under $OUT (default ./device-out); the
# table of several runs together (one command per program on the GPU
# machine) is `vgpu-probe apps --from A/runs.jsonl,B/runs.jsonl`.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = prepare ]; then
	exec experiments/paper/device/run.sh prepare
fi
D=build/device
B=build/apps
OUT=${OUT:-$PWD/device-out}
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
mkdir -p "$B" "$OUT"
[ -x "$D/vgpu-probe" ] || { echo "$D/vgpu-probe missing: run '$0 prepare' where Go is, and carry build/device" >&2; exit 2; }
for p in mixed_static launch_bound; do
	if [ ! -x "$B/$p" ] || [ "experiments/apps/$p.cu" -nt "$B/$p" ] || [ experiments/apps/loop.h -nt "$B/$p" ]; then
		"$NVCC" -O2 -arch=native -o "$B/$p" "experiments/apps/$p.cu" 2>/dev/null ||
			"$NVCC" -O2 -arch=sm_90 -o "$B/$p" "experiments/apps/$p.cu"
	fi
done
gcc -shared -fPIC -O2 -o "$B/blocksync.so" advise/blocksync/blocksync.c -ldl
cp experiments/apps/*.py "$B/"
{
	date -u
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
	"$NVCC" --version | tail -1 || true
	python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1 || true
	python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -1 || true
	lscpu | grep -E 'Model name|^CPU\(s\)' || true
} >"$OUT/apps-machine.txt" 2>&1
exec "$D/vgpu-probe" apps --suite experiments/apps/suite.json --dir "$B" \
	--lib "$D/lib/libhybridsync.so" --blocksync "$B/blocksync.so" \
	--out "$OUT/apps-$(date -u +%Y%m%d-%H%M%S)" "$@"
