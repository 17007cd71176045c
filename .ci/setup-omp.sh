#!/usr/bin/env bash
# CI setup for the OpenMP tests of libhybridsync (libhybridsync/ctest/omp_test.go):
# LLVM's OpenMP runtime (libomp-dev), which the tests link a gcc-compiled
# OpenMP program against to check the stats and the launcher with libomp,
# and shellcheck, which lints the installed hybridsync-run. gcc's own
# libgomp comes with gcc. Idempotent; assumes apt-get update ran.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
# grep without -q: under pipefail, -q would fail the pipe with SIGPIPE.
ldconfig -p | grep 'libomp\.so\.5 ' >/dev/null || need+=(libomp-dev)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
if [ ${#need[@]} -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi
