#!/usr/bin/env bash
# The in-process suite without the agent and with it, on one GPU machine
# instance, for "Agent and library together" in docs/BENCHMARKS.md:
#
#   experiments/apps/diag/agent-pairs.sh CONFIG...   # on the GPU machine, as root
#
# CONFIG: plain (no agent), hints (apps --with-agent --hints), slice
# (--with-agent --hints --mitigate slice=100us) or libslice (the same with
# --mitigate-arms hybridsync: the CUDA arms without the slice, in the same
# process as the library with it), run in the order given;
# alternate the order between calls. SETTINGS=cap,cap+while1 picks other
# contention settings (default none,while1), PROGRAMS=a,b some of the
# programs (default all). The user-loop programs' host work is calibrated
# once per call and passed to every process (APPS_HOST_UNITS), so that
# the configs of one call run the same work.
# Results: $OUT/CONFIG-TAG/apps-*/runs.jsonl (TAG default r1), packed into
# $OUT/suite-TAG.tgz at the end. Needs build/device from
# `experiments/apps/run.sh prepare`.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
[ $# -gt 0 ] || { echo "usage: $0 plain|hints|slice|libslice..." >&2; exit 2; }
OUT=${OUT:?set OUT to the output directory}
TAG=${TAG:-r1}
SETTINGS=${SETTINGS:-none,while1}
USERLOOPS="torch_infer_host torch_train_dataprep torch_two_threads"
PROGRAMS=${PROGRAMS:-torch_infer,cupy_stencil,mixed_static,launch_bound,${USERLOOPS// /,}}
fixed="" # the programs without host work to calibrate
for p in ${PROGRAMS//,/ }; do
	[[ " $USERLOOPS " == *" $p "* ]] || fixed+=${fixed:+,}$p
done
agent_args() {
	case $1 in
	plain) ;;
	hints) echo --with-agent --hints ;;
	slice) echo --with-agent --hints --mitigate slice=100us ;;
	libslice) echo --with-agent --hints --mitigate slice=100us --mitigate-arms hybridsync ;;
	*) echo "unknown config $1: want plain, hints, slice or libslice" >&2; return 2 ;;
	esac
}
for cfg in "$@"; do agent_args "$cfg" >/dev/null || exit 2; done
mkdir -p "$OUT"
U=$OUT/units.txt
: >"$U"
for p in $USERLOOPS; do
	[[ ,$PROGRAMS, == *,$p,* ]] || continue
	n=$(cd experiments/apps && timeout 120 python3 "$p.py" --steps 30 2>/dev/null | tail -n 1 |
		python3 -c 'import sys,json; print(json.load(sys.stdin)["host_units"])') ||
		{ echo "$p: calibration failed" >&2; exit 1; }
	echo "$p $n" >>"$U"
done
suite() { # CONFIG-DIR PROGRAMS [UNITS]
	APPS_HOST_UNITS=${3:-0} OUT=$1 experiments/apps/run.sh --suite experiments/apps/inproc.json --only "$2" \
		--contention "$SETTINGS" --reps 1 --timeout 90s "${args[@]}" 2>&1 | tail -n 20
}
for cfg in "$@"; do
	read -ra args <<<"$(agent_args "$cfg")"
	d=$OUT/$cfg-$TAG
	echo "== $cfg $(date -u +%T)"
	[ -z "$fixed" ] || suite "$d" "$fixed"
	while read -r p n; do suite "$d" "$p" "$n"; done <"$U"
done
tar czf "/tmp/suite-$TAG.tgz" -C "$OUT" . && mv "/tmp/suite-$TAG.tgz" "$OUT/"
