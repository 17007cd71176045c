#!/bin/sh
# .rpm %preun: on erase ($1 is 0, not an upgrade) disable the agent's unit.
# Not --now: a running agent is stopped by the administrator, not the
# package.
if [ "$1" -eq 0 ] && command -v systemctl >/dev/null 2>&1; then
	systemctl disable vgpu-probe-agent.service >/dev/null 2>&1 || true
fi
exit 0
