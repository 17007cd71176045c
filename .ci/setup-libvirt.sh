#!/bin/sh
# setup-libvirt.sh: bring up a real libvirtd + QEMU for the libvirt tests on
# a Debian 12 machine without systemd (CI, containers), or stop it again.
#
#   .ci/setup-libvirt.sh [up]   install packages, build the guest image,
#                               start virtlogd and libvirtd, wait for the socket
#   .ci/setup-libvirt.sh down   stop the daemons this script starts (by pid file)
#   .ci/setup-libvirt.sh status exit 0 if qemu:///system answers
#
# Idempotent: every step checks first, so running it again is cheap.
# Assumes `apt-get update` already ran. Must run as root.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
URI=qemu:///system
LIBVIRTD_PID=/run/libvirtd.pid
VIRTLOGD_PID=/run/virtlogd.pid
DAEMON_LOG=/var/log/libvirt/vgpu-probe-daemons.log
TEST_LOCK=/run/lock/vgpu-probe-libvirt-tests.lock
# How long to wait for the daemon socket to answer after starting it.
WAIT_S=${VGPU_LIBVIRT_WAIT_S:-60}

log() { echo "setup-libvirt: $*" >&2; }
die() { log "error: $*"; exit 1; }

answers() {
	command -v virsh >/dev/null 2>&1 || return 1
	# timeout: a wedged daemon must not hang CI.
	timeout 10 virsh -c "$URI" list >/dev/null 2>&1
}

# The packages the tests need. --no-install-recommends keeps the install
# small: no dnsmasq, no firewall helpers; the test domains have no network.
PKGS="libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 busybox-static cpio"

# The missing ones are gathered in the function's own arguments, the one
# list a POSIX shell has.
install_pkgs() {
	set --
	for p in $PKGS; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
			set -- "$@" "$p"
		fi
	done
	if [ $# -eq 0 ]; then
		return 0
	fi
	log "installing: $*"
	# Another apt may hold the lock (CI images, parallel setup): wait for it
	# rather than failing.
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
		install -y -q --no-install-recommends "$@" >/dev/null ||
		die "apt-get install $* failed (did apt-get update run?)"
}

pid_alive() { # pidfile comm
	[ -s "$1" ] || return 1
	pid=$(cat "$1")
	[ -d "/proc/$pid" ] || return 1
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

up() {
	[ "$(id -u)" = 0 ] || die "must run as root (libvirtd system daemon)"
	install_pkgs
	# With Go at hand, the image carries a static vgpu-probe for the
	# libvirt experiment backend (make vmimage); without, the bare guest
	# the agent's tests boot.
	if command -v go >/dev/null 2>&1 && command -v make >/dev/null 2>&1; then
		make -s -C "$ROOT" vmimage >&2 || die "make vmimage failed"
	else
		"$ROOT/vmimages/build.sh"
	fi

	# Without udev, /dev/kvm stays root:root 0600. libvirt then sees that the
	# QEMU user (libvirt-qemu, group kvm) cannot open it, declares its cached
	# QEMU capabilities stale on every call and re-probes every QEMU binary
	# at each domain start (docs/vm-testing.md has the cost). Give it the mode
	# Debian's udev rule would (root:kvm 0660). Our domains still use TCG.
	if [ -c /dev/kvm ] && ! getent group kvm >/dev/null; then
		log "creating group kvm for /dev/kvm (no udev here)"
		groupadd --system kvm
		usermod -a -G kvm libvirt-qemu
	fi
	if [ -c /dev/kvm ] && [ "$(stat -c %G:%a /dev/kvm)" != kvm:660 ]; then
		log "setting /dev/kvm to root:kvm 0660 (no udev here)"
		chgrp kvm /dev/kvm
		chmod 660 /dev/kvm
	fi

	if answers; then
		log "libvirtd already answers on $URI"
		return 0
	fi
	# No systemd: start the daemons ourselves. virtlogd first, libvirtd
	# hands QEMU's stdout/stderr to it.
	# Their output goes to a file: a daemon holding the caller's stdout
	# open would keep a CI step that pipes it from ever finishing.
	mkdir -p "$(dirname "$DAEMON_LOG")"
	if ! pid_alive "$VIRTLOGD_PID" virtlogd; then
		log "starting virtlogd"
		virtlogd -d </dev/null >>"$DAEMON_LOG" 2>&1 || die "virtlogd failed to start; see $DAEMON_LOG"
	fi
	if ! pid_alive "$LIBVIRTD_PID" libvirtd; then
		log "starting libvirtd"
		libvirtd -d </dev/null >>"$DAEMON_LOG" 2>&1 || die "libvirtd failed to start; see $DAEMON_LOG"
	fi
	i=0
	while ! answers; do
		i=$((i + 1))
		if [ "$i" -gt "$WAIT_S" ]; then
			tail -n 20 "$DAEMON_LOG" >&2 || true
			die "libvirtd did not answer on $URI within ${WAIT_S}s"
		fi
		sleep 1
	done
	log "libvirtd answers on $URI"
}

stop_one() { # pidfile comm
	if pid_alive "$1" "$2"; then
		pid=$(cat "$1")
		log "stopping $2 (pid $pid)"
		kill "$pid"
		i=0
		while [ -d "/proc/$pid" ] && [ "$i" -lt 50 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		if [ -d "/proc/$pid" ]; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
}

down() {
	# Wait for libvirt tests that are running (they hold this lock, see
	# agent/libvirt/libvirttest) instead of pulling the daemon from under them.
	mkdir -p "$(dirname "$TEST_LOCK")"
	exec 9>>"$TEST_LOCK"
	flock -w 600 9 || die "libvirt tests still hold $TEST_LOCK after 600s"
	# libvirtd keeps transient domains running after it exits (QEMU is
	# its own process); destroy the ones tests may have leaked first.
	if answers; then
		for d in $(virsh -c "$URI" list --name 2>/dev/null | grep -E '^vgpu-probe-(test|run)-' || true); do
			log "destroying leftover domain $d"
			virsh -c "$URI" destroy "$d" >/dev/null 2>&1 || true
		done
	fi
	stop_one "$LIBVIRTD_PID" libvirtd
	stop_one "$VIRTLOGD_PID" virtlogd
}

case "${1:-up}" in
up) up ;;
down | stop) down ;;
status) answers ;;
*) die "usage: $0 [up|down|status]" ;;
esac
