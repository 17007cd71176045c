#!/bin/sh
# .deb postinst: enable the agent's unit on first install (as Debian's
# debhelper does, through deb-systemd-helper, which keeps an administrator's
# disable across upgrades) and refresh the loader's cache for the library.
# The agent is never started or restarted here: an upgrade leaves a running
# agent running its old binary until `systemctl restart vgpu-probe-agent`.
set -e
unit=vgpu-probe-agent.service
if [ "$1" = configure ]; then
	ldconfig
	if command -v deb-systemd-helper >/dev/null 2>&1; then
		deb-systemd-helper unmask "$unit" >/dev/null || true
		if deb-systemd-helper --quiet was-enabled "$unit"; then
			deb-systemd-helper enable "$unit" >/dev/null || true
		else
			deb-systemd-helper update-state "$unit" >/dev/null || true
		fi
	elif command -v systemctl >/dev/null 2>&1 && [ -z "$2" ]; then
		systemctl enable "$unit" >/dev/null 2>&1 || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
		if [ -n "$2" ] && systemctl --quiet is-active "$unit"; then
			echo "vgpu-probe: the agent still runs the old version; restart it with: systemctl restart vgpu-probe-agent" >&2
		fi
	fi
fi
