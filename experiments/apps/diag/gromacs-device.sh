#!/usr/bin/env bash
# GROMACS on the GPU machine, in the steps the suite needs (docs/gromacs.md):
#
#   gromacs-device.sh build SRC.tar.xz   # (a release's .tar.gz or .tar.xz) build gmx plain and linked with libhybridsync,
#                                        # make the inputs, check one short run of each;
#                                        # packs $OUT/gmx-plain.tar.xz, $OUT/gmx-linked.tar.xz
#   gromacs-device.sh unpack DIR         # unpack DIR/gmx-{plain,linked}.tar.xz and make the inputs
#   gromacs-device.sh suite [ARGS...]    # vgpu-probe apps on experiments/apps/gromacs.json
#
# build/device must hold what `experiments/apps/run.sh prepare` builds, and
# build/device/hs an install of the library (make install-lib PREFIX=...).
# Everything lands under $G (default /tmp/gromacs) and $OUT.
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=${G:-/tmp/gromacs}
OUT=${OUT:-$PWD/device-out}
PY="python3 experiments/apps/gromacs.py"
mkdir -p "$G" "$OUT" build/apps
export PYTHONUNBUFFERED=1

inputs() {
	for box in 5 8; do
		[ -f "$G/water$box/topol.tpr" ] || $PY input --gmx "$G/plain/install/bin/gmx" --box "$box" --out "$G/water$box" --threads "$(nproc)"
	done
	ln -sfn "$G/water5" build/apps/water5
	ln -sfn "$G/water8" build/apps/water8
}

case ${1:-} in
build)
	[ -f "${2:-}" ] || { echo "gromacs-device.sh build: ${2:-no} source archive: no such file (a GROMACS release .tar.gz or .tar.xz)" >&2; exit 2; }
	top=$(tar -tf "$2" | sed -n 1p) # sed reads it all: no SIGPIPE under pipefail
	top=${top%%/*}
	tar -xf "$2" -C "$G"
	src=$G/$top
	if ! grep -qs 'project(Gromacs' "$src/CMakeLists.txt"; then
		echo "gromacs-device.sh build: $2 holds no GROMACS source tree at its top ($top/CMakeLists.txt)" >&2
		exit 2
	fi
	{ nproc; gcc --version | head -1; cmake --version | head -1; nvcc --version | tail -1; grep -m1 'model name' /proc/cpuinfo; } >"$OUT/gromacs-machine.txt" 2>&1
	# One build tree: the linked build reconfigures it and relinks.
	(time $PY build --source "$src" --build "$G/bld" --out "$G/plain") >"$OUT/build-plain.log" 2>&1
	(time $PY build --source "$src" --build "$G/bld" --out "$G/linked" --link-hybridsync "$PWD/build/device/hs") >"$OUT/build-linked.log" 2>&1
	cp "$G/plain/gmx.tar.xz" "$OUT/gmx-plain.tar.xz"
	cp "$G/linked/gmx.tar.xz" "$OUT/gmx-linked.tar.xz"
	inputs
	;;
unpack)
	for v in plain linked; do
		mkdir -p "$G/$v/install"
		tar -xJf "$2/gmx-$v.tar.xz" -C "$G/$v/install"
	done
	inputs
	;;
suite)
	shift
	[ -x "$G/plain/install/bin/gmx" ] || { echo "no gmx under $G: run '$0 build' or '$0 unpack' first" >&2; exit 2; }
	export GMX=$G/plain/install/bin/gmx GMX_LINKED=$G/linked/install/bin/gmx
	# What run.sh does, less the .cu programs that GROMACS does not need.
	gcc -shared -fPIC -O2 -o build/apps/blocksync.so advise/blocksync/blocksync.c -ldl
	cp experiments/apps/*.py build/apps/
	exec build/device/vgpu-probe apps --suite experiments/apps/gromacs.json --dir build/apps \
		--lib build/device/lib/libhybridsync.so --blocksync build/apps/blocksync.so \
		--out "$OUT/gromacs-$(date -u +%Y%m%d-%H%M%S)" "$@"
	;;
*)
	sed -n '2,12p' "$0" >&2
	exit 2
	;;
esac
