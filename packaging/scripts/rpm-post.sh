#!/bin/sh
# .rpm %post: enable the agent's unit on first install ($1 is 1), never
# start or restart it; refresh the loader's cache for the library.
unit=vgpu-probe-agent.service
ldconfig
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" -eq 1 ] && command -v systemctl >/dev/null 2>&1; then
	systemctl enable "$unit" >/dev/null 2>&1 || true
fi
exit 0
