#!/usr/bin/env bash
# CI setup for libhybridsync/ (libhybridsync): the tests build the library with gcc
# and make, check `pkg-config --cflags --libs hybridsync`, build a CMake
# consumer, and run the suite's Python harness (experiments/apps/inproc.py)
# on the stand-in CUDA. Idempotent; assumes apt-get update ran.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
for p in gcc make pkg-config cmake python3; do
	command -v "$p" >/dev/null 2>&1 || need+=("$p")
done
# python3-numpy: the suite's user-loop programs' host work
# (experiments/apps/test_userloop.py, run by experiments/apps/suite's tests).
python3 -c 'import numpy' 2>/dev/null || need+=(python3-numpy)
# lmod: the environment module's test (libhybridsync/ctest, TestModuleLoad)
# loads it as a site's users would.
[ -f /usr/share/lmod/lmod/init/bash ] || need+=(lmod)
if [ ${#need[@]} -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi
