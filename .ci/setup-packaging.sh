#!/usr/bin/env bash
# CI setup for packaging/: the .deb is installed with dpkg and its unit
# checked with systemd-analyze (systemd); the .rpm's file list read with
# rpm; the agent's image run with podman, under runc, which (unlike crun)
# runs on hosts with cgroup v1 controllers beside a v2 hierarchy.
# Idempotent; assumes apt-get update ran.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v rpm >/dev/null 2>&1 || need+=(rpm)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi
