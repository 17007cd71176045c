#!/bin/sh
# .deb postrm: the unit's enablement is the administrator's configuration,
# kept on remove and dropped on purge (as debhelper does: masked while the
# unit file is gone, so a dangling link starts nothing). A running agent is
# not stopped: it goes on from its deleted binary until stopped.
set -e
unit=vgpu-probe-agent.service
case "$1" in
remove)
	ldconfig
	if command -v deb-systemd-helper >/dev/null 2>&1; then
		deb-systemd-helper mask "$unit" >/dev/null || true
	fi
	;;
purge)
	if command -v deb-systemd-helper >/dev/null 2>&1; then
		deb-systemd-helper purge "$unit" >/dev/null || true
		deb-systemd-helper unmask "$unit" >/dev/null || true
	fi
	;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
