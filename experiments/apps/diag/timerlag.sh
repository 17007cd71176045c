#!/usr/bin/env bash
# Wake-ups of a step loop beside a busy co-runner on its CPU, by the share
# of the CPU the loop asks for, with the default slice and a 100 µs one,
# from a timer on its CPU and from a thread on another CPU (timerlag.c says
# what it measures). Root, Linux 6.12+ for the slice.
#
#   experiments/apps/diag/timerlag.sh [SECONDS] [REPS]   # one line per run on stdout
#
# SLICES (default "0 100": the default slice, 100 µs) and WAKES (default
# "timer remote") pick the cells beside while1.
set -euo pipefail
cd "$(dirname "$0")"
S=${1:-4}
REPS=${2:-2}
CPU=$(($(nproc) - 1))
BIN=$(mktemp -d)/timerlag
gcc -O2 -o "$BIN" timerlag.c -lpthread
COR=""
trap '[ -n "$COR" ] && kill "$COR" 2>/dev/null; rm -rf "$(dirname "$BIN")"' EXIT
SLICES=${SLICES:-0 100}
WAKES=${WAKES:-timer remote}
# wakeargs WAKE sets w to timerlag's last arguments: "remote" for a wake-up
# from another CPU, none for the timer's.
wakeargs() { if [ "$1" = remote ]; then w=(remote); else w=(); fi; }
for wake in $WAKES; do
	wakeargs "$wake"
	for work in 100 300 500 700 900; do
		echo "alone $("$BIN" "$CPU" "$work" 500 1 0 "${w[@]}")"
	done
done
taskset -c "$CPU" sh -c 'while :; do :; done' &
COR=$!
for rep in $(seq "$REPS"); do
	for work in 100 300 500 700 900; do
		for slice in $SLICES; do
			for wake in $WAKES; do
				wakeargs "$wake"
				echo "while1 rep=$rep $("$BIN" "$CPU" "$work" 500 "$S" "$slice" "${w[@]}")"
			done
		done
	done
done
