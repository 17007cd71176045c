#!/usr/bin/env bash
# CI setup for the operator's side of the agent: Debian's Prometheus server
# and promtool. Tests start their own server on loopback (the round trip of
# `report --prometheus`), check the exporter's output with `promtool check
# metrics` and the shipped rules with `promtool test rules`. The package's
# own service is not started (there is no systemd in CI). Idempotent;
# assumes apt-get update ran; an argument (e.g. "down") means teardown, and
# there is nothing to tear down here.
set -euo pipefail
[ "$#" -eq 0 ] || exit 0
export DEBIAN_FRONTEND=noninteractive
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
	# policy-rc.d keeps the package's postinst from starting a server.
	made=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		made=1
	fi
	apt-get install -y -q --no-install-recommends prometheus
	[ -z "$made" ] || rm -f /usr/sbin/policy-rc.d
fi
prometheus --version | head -1
promtool --version | head -1
