#!/usr/bin/env bash
# What the library adds to a kernel launch and to a step, on the CUDA
# stand-in (no GPU needed; run it on the GPU machine for its CPU): the
# stand-in's launchbench (libcudart and cudart compiled in) and stepbench,
# plain and under LD_PRELOAD of each library given, ROUNDS rounds, the
# order rotated each round; medians and the paired difference of each
# library to the first.
#
#   experiments/paper/device/launchtax.sh LIB [OTHER_LIB] [ROUNDS]   # e.g. build/lib/libhybridsync.so
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
libs=("$(realpath "$1")")
[ $# -ge 2 ] && [ -n "$2" ] && libs+=("$(realpath "$2")")
ROUNDS=${3:-15}
for l in "${libs[@]}"; do [ -f "$l" ] || { echo "launchtax.sh: $l: no such library" >&2; exit 2; }; done
S=libhybridsync/testdata/standin P=libhybridsync/testdata/programs
B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
gcc -O2 -shared -fPIC -o "$B/libcuda.so.1" -Wl,-soname,libcuda.so.1 $S/cuda.c -lpthread
gcc -O2 -shared -fPIC -o "$B/libcudart.so.13" -Wl,-soname,libcudart.so.13 $S/cudart.c -ldl -lpthread
ln -sf libcudart.so.13 "$B/libcudart.so"
gcc -O2 -rdynamic -I$P -o "$B/launchbench_dyn" $P/launchbench.c -L"$B" -lcudart -lpthread -ldl
gcc -O2 -rdynamic -I$P -o "$B/launchbench_static" $P/launchbench.c $S/cudart.c -lpthread -ldl
gcc -O2 -rdynamic -I$P -o "$B/stepbench" $P/stepbench.c -L"$B" -lcudart -lpthread -ldl
arms=("" "${libs[@]}")
for spec in launchbench_dyn:launch_ns:100000 launchbench_static:launch_ns:100000 stepbench:step_ns:2000; do
	IFS=: read -r prog key n <<<"$spec"
	: >"$B/$prog.txt"
	for r in $(seq "$ROUNDS"); do
		for k in "${!arms[@]}"; do
			a=$(((k + r) % ${#arms[@]}))
			v=$(LD_LIBRARY_PATH=$B LD_PRELOAD=${arms[$a]} "$B/$prog" "$n" 2>&1 | awk -v k="$key" '$1==k{print $2}')
			echo "$r $a $v" >>"$B/$prog.txt"
		done
	done
	python3 - "$prog" "$key" "$B/$prog.txt" "${#arms[@]}" <<'PY'
import statistics as st
import sys
prog, key, path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
d = {}
for line in open(path):
    w = line.split()
    if len(w) == 3:
        d.setdefault(int(w[1]), {})[w[0]] = float(w[2])
reps = sorted(set.intersection(*(set(d.get(a, {})) for a in range(n))))
if not reps:
    sys.exit("launchtax.sh: %s printed no %s" % (prog, key))
med = [st.median(d[a][r] for r in reps) for a in range(n)]
out = ["%s %s (n=%d): plain %.1f" % (prog, key, len(reps), med[0])]
for a in range(1, n):
    out.append("lib%d %.1f (+%.1f)" % (a, med[a], st.median(d[a][r] - d[0][r] for r in reps)))
if n == 3:
    out.append("lib2 - lib1 paired %.1f" % st.median(d[2][r] - d[1][r] for r in reps))
print(", ".join(out))
PY
done
