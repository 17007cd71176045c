#!/usr/bin/env bash
# libhybridsync on a GPU machine: build, check, measure, in one call.
#
#   experiments/paper/device/run.sh prepare        # here, with Go: builds build/device/
#   experiments/paper/device/run.sh check          # on the GPU machine (nvcc, no Go)
#   experiments/paper/device/run.sh bench [fixed|mixed|all]
#
# check: builds the C/CUDA programs with nvcc against build/device, checks
# hs_sync on the GPU in every mode (never early, same codes), measures the
# completed-event overhead, runs an unmodified static-cudart program and a
# PyTorch loop (if torch imports) under LD_PRELOAD, with and without CPU
# contention. bench: `vgpu-probe bench --device cuda`, every mode, under
# none / while1 / cgroup cpu.max 10ms per 20ms / cap + co-runner, median of
# REPS. Everything goes under $OUT (default ./device-out).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=$ROOT/build/device
OUT=${OUT:-$ROOT/device-out}
REPS=${REPS:-3}
STEPS=${STEPS:-1500}
mkdir -p "$OUT"

prepare() {
	rm -rf "$B"
	mkdir -p "$B/lib" "$B/include"
	go build -buildmode=c-shared -o "$B/lib/libhybridsync.so" ./libhybridsync/lib
	go build -tags hs_nointerpose -buildmode=c-archive -o "$B/lib/libhybridsync.a" ./libhybridsync/lib
	rm -f "$B/lib/libhybridsync.h"
	cp libhybridsync/include/hybridsync.h "$B/include/"
	CGO_ENABLED=1 go build -ldflags '-s -w' -o "$B/vgpu-probe" ./cmd/vgpu-probe
	# LLVM's libomp for HYBRIDSYNC_OPENMP=live (the hybridsync-run-live
	# arm), which the GPU machine may lack: there, point HYBRIDSYNC_LIBOMP
	# at build/device/lib/libomp.so.5.
	local omp
	for omp in /usr/lib/*-linux-gnu/libomp.so.5; do
		[ -e "$omp" ] && cp -L "$omp" "$B/lib/libomp.so.5" && break
	done
	ls -la "$B" "$B/lib"
}

CPU=$(($(nproc) - 1))
CG=/sys/fs/cgroup/hs-device-$$
echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
COR=""
cleanup() {
	if [ -n "$COR" ]; then kill "$COR" 2>/dev/null || true; fi
	if [ -d "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
}
trap cleanup EXIT

# under SCENARIO CMD...: runs CMD pinned to $CPU under a contention setting.
under() {
	local sc=$1
	shift
	case $sc in
	none) taskset -c "$CPU" "$@" ;;
	while1|cap+while1)
		taskset -c "$CPU" sh -c 'while :; do :; done' &
		COR=$!
		if [ "$sc" = while1 ]; then
			taskset -c "$CPU" "$@" || true
		else
			mkdir -p "$CG"
			echo "10000 20000" >"$CG/cpu.max"
			sh -c 'echo $$ >'"$CG"'/cgroup.procs && exec "$@"' sh taskset -c "$CPU" "$@" || true
		fi
		kill "$COR"
		wait "$COR" 2>/dev/null || true
		COR=""
		;;
	esac
}

check() {
	NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	D=$OUT/bin
	mkdir -p "$D"
	{
		date -u
		nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv || true
		$NVCC --version | tail -2
		lscpu | grep -E 'Model name|^CPU\(s\)' || true
		uname -r
	} >"$OUT/machine.txt" 2>&1
	local inc=(-I"$B/include" -I"$ROOT/experiments/paper/device")
	$NVCC -O2 "${inc[@]}" -o "$D/gpucheck" experiments/paper/device/gpucheck.cu -L"$B/lib" -lhybridsync -Xlinker -rpath="$B/lib" || echo "BUILD FAILED: nvcc" >>"$OUT/build-errors.txt"
	$NVCC -O2 "${inc[@]}" -o "$D/gpucheck_static" experiments/paper/device/gpucheck.cu "$B/lib/libhybridsync.a" -lpthread -ldl || echo "BUILD FAILED: nvcc" >>"$OUT/build-errors.txt"
	$NVCC -O2 "${inc[@]}" -o "$D/overhead" experiments/paper/device/overhead.cu -L"$B/lib" -lhybridsync -Xlinker -rpath="$B/lib" || echo "BUILD FAILED: nvcc" >>"$OUT/build-errors.txt"
	$NVCC -O2 "${inc[@]}" -o "$D/namd_like" experiments/paper/device/namd_like.cu || echo "BUILD FAILED: nvcc" >>"$OUT/build-errors.txt"
	echo "== gpucheck (.so)" | tee "$OUT/check.txt"
	"$D/gpucheck" >>"$OUT/check.txt" 2>&1 && echo PASS >>"$OUT/check.txt" || echo "FAIL rc=$?" >>"$OUT/check.txt"
	echo "== gpucheck (.a)" >>"$OUT/check.txt"
	"$D/gpucheck_static" >>"$OUT/check.txt" 2>&1 && echo PASS >>"$OUT/check.txt" || echo "FAIL rc=$?" >>"$OUT/check.txt"
	echo "== gpucheck fault" >>"$OUT/check.txt"
	"$D/gpucheck" fault >>"$OUT/check.txt" 2>&1 && echo PASS >>"$OUT/check.txt" || echo "FAIL rc=$?" >>"$OUT/check.txt"
	cat "$OUT/check.txt"

	echo "== overhead" | tee "$OUT/overhead.txt"
	for _ in 1 2 3; do taskset -c "$CPU" "$D/overhead" >>"$OUT/overhead.txt" || true; done
	echo "== overhead under LD_PRELOAD (cudaEventSynchronize interposed)" >>"$OUT/overhead.txt"
	for _ in 1 2 3; do LD_PRELOAD=$B/lib/libhybridsync.so taskset -c "$CPU" "$D/overhead" >>"$OUT/overhead.txt" || true; done
	cat "$OUT/overhead.txt"

	# An unmodified static-cudart program under LD_PRELOAD.
	echo "scenario kernel variant rep result" >"$OUT/namd_like.txt"
	for sc in none cap+while1; do
		for kus in 500 0; do
			for rep in $(seq "$REPS"); do
				for v in plain hybrid block spin; do
					if [ $v = plain ]; then
						r=$(under $sc "$D/namd_like" "$STEPS" 200 $kus || true)
					else
						r=$(under $sc env LD_PRELOAD="$B/lib/libhybridsync.so" HYBRIDSYNC_MODE=$v \
							HYBRIDSYNC_STATS="$OUT/stats-namd-${sc/+/_}-$kus-$v-$rep.json" "$D/namd_like" "$STEPS" 200 $kus || true)
					fi
					echo "$sc $kus $v $rep $r" | tee -a "$OUT/namd_like.txt"
				done
			done
		done
	done

	# PyTorch (dynamic cudart: the runtime path).
	if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
		echo "scenario variant rep result" >"$OUT/torch.txt"
		for sc in none cap+while1; do
			for rep in $(seq "$REPS"); do
				for v in plain hybrid block; do
					if [ $v = plain ]; then
						r=$(under $sc python3 experiments/paper/device/torch_loop.py 1000 200 500 2>&1 | tail -1 || true)
					else
						r=$(under $sc env LD_PRELOAD="$B/lib/libhybridsync.so" HYBRIDSYNC_MODE=$v \
							HYBRIDSYNC_STATS="$OUT/stats-torch-${sc/+/_}-$v-$rep.json" \
							python3 experiments/paper/device/torch_loop.py 1000 200 500 2>&1 | tail -1 || true)
					fi
					echo "$sc $v $rep $r" | tee -a "$OUT/torch.txt"
				done
			done
		done
	else
		echo "torch not importable with CUDA here" | tee "$OUT/torch.txt"
	fi
	# One file for all stats: only a few files come back from a run.
	for f in "$OUT"/stats-*.json; do
		[ -e "$f" ] && printf '%s %s\n' "$(basename "$f")" "$(tr -d '\n' <"$f")"
	done >"$OUT/stats-all.txt"
	rm -f "$OUT"/stats-*.json
}

bench() {
	local which=${1:-all}
	local modes=hybrid,paper,spin,yield,block,cuda-auto
	local cont=none,while1,cap,cap+while1
	if [ "$which" = fixed ] || [ "$which" = all ]; then
		"$B/vgpu-probe" bench --device cuda --modes $modes --contention $cont --reps "$REPS" --steps "$STEPS" \
			--host-us 200 --kernel-us 500 --cpu "$CPU" --out "$OUT/bench-fixed" --json >"$OUT/bench-fixed.json"
	fi
	if [ "$which" = mixed ] || [ "$which" = all ]; then
		"$B/vgpu-probe" bench --device cuda --modes $modes --contention $cont --reps "$REPS" --steps "$STEPS" \
			--host-us 200 --profile mixed --cpu "$CPU" --out "$OUT/bench-mixed" --json >"$OUT/bench-mixed.json"
	fi
}

case ${1:-} in
prepare) prepare ;;
check) check ;;
bench) bench "${2:-all}" ;;
*)
	echo "usage: $0 prepare | check | bench [fixed|mixed|all]" >&2
	exit 2
	;;
esac
