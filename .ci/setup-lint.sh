#!/usr/bin/env bash
# CI setup for `make lint-scripts`: shellcheck for the shell scripts and
# pyflakes (Debian's pyflakes3, the command of python3-pyflakes) for the
# Python ones. Idempotent; assumes apt-get update ran. .ci/run calls every
# setup script; an argument (e.g. "down") means teardown, and there is
# nothing to tear down here.
set -euo pipefail
[ "$#" -eq 0 ] || exit 0
export DEBIAN_FRONTEND=noninteractive
need=()
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
command -v pyflakes3 >/dev/null 2>&1 || need+=(pyflakes3)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ "${#need[@]}" -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi
shellcheck --version | sed -n 2p
pyflakes3 --version
