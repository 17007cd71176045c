#!/bin/sh
# build.sh [OUTDIR]: build the tiny test guest (kernel + initramfs) that the
# libvirt tests and the libvirt experiment backend boot under TCG.
#
# Output (default OUTDIR: vmimages/cache, git-ignored):
#   vmlinuz            Debian's cloud kernel, taken from the .deb without
#                      installing it (dpkg -x), so the host kernel is untouched
#   initramfs.cpio.gz  busybox-static + /init (below) + a few virtio modules,
#                      and /bin/vgpu-probe when $VGPU_GUEST_BIN names a static
#                      build of it (make vmimage does; see Makefile.inc), and
#                      the tree $VGPU_GUEST_EXTRA names laid over its root
#                      (make vmimage-openmp: an OpenMP program, the
#                      launcher and their libraries; openmp-payload.sh)
#   kernel.version     the kernel package it came from
#   stamp              hashes of this script, of the guest binary and of
#                      the extra tree; a rebuild happens when one changes
#
# The guest's /init mounts /proc and /sys, prints the ready line
# "vgpu-probe-guest: ready", then idles. Kernel command line switches:
#   vgpu.busy=1    one busy loop per vCPU (a CPU-bound guest)
#   vgpu.virtio=1  load virtio_pci + virtio_console (virtio-serial channels)
#   vgpu.job=JOB   run `vgpu-probe vm-job` (the libvirt experiment backend's
#                  job, base64url JSON), then power off; implies vgpu.virtio=1
# With an ivshmem-plain device (1af4:1110: the host's hint page, <shmem>) and
# /bin/vgpu-probe, init runs `vgpu-probe guest --once` first, which mounts the
# page read-only at /dev/shm/vgpu-probe-hints.
#
# Idempotent: when the outputs exist and the stamp matches it exits at once,
# without touching the network. VGPU_VMIMAGE_REBUILD=1 forces a rebuild.
# Reproducible: the same packages and guest binary give the same bytes
# (sorted cpio entries, owner 0, mtimes 0, gzip without a name or time).
# Needs: root (mknod /dev/console), apt (Debian 12), busybox-static, cpio.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE/cache}
# $0, not $HERE/build.sh: vmimages.Build runs an embedded copy from a temp file.
SELF=$0

log() { echo "vmimages: $*" >&2; }
die() { log "error: $*"; exit 1; }

GUEST_BIN=${VGPU_GUEST_BIN:-}
EXTRA=${VGPU_GUEST_EXTRA:-}
[ -z "$EXTRA" ] || [ -d "$EXTRA" ] || die "VGPU_GUEST_EXTRA=$EXTRA is not a directory"
if [ -n "$GUEST_BIN" ]; then
	[ -x "$GUEST_BIN" ] || die "VGPU_GUEST_BIN=$GUEST_BIN is not an executable"
	file_type=$(od -An -c -N4 "$GUEST_BIN" | tr -d ' ')
	[ "$file_type" = "177ELF" ] || die "VGPU_GUEST_BIN=$GUEST_BIN is not an ELF binary"
fi
# The stamp is the script's hash, then the guest binary's (or "none"),
# then the extra tree's (or "none": names, modes and contents, in order).
# A build that is given no binary accepts an image with any binary: the
# tests that only boot the guest (agent/libvirt) must not throw away the
# one that make vmimage built for the experiments. Likewise the extra.
stamp=$(sha256sum "$SELF" | cut -d' ' -f1)
bin_stamp=none
[ -z "$GUEST_BIN" ] || bin_stamp=$(sha256sum "$GUEST_BIN" | cut -d' ' -f1)
extra_stamp=none
[ -z "$EXTRA" ] || extra_stamp=$(tar -C "$EXTRA" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . | sha256sum | cut -d' ' -f1)
if [ "${VGPU_VMIMAGE_REBUILD:-0}" != 1 ] &&
	[ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initramfs.cpio.gz" ] &&
	[ "$(sed -n 1p "$OUT/stamp" 2>/dev/null)" = "$stamp" ] &&
	{ [ -z "$GUEST_BIN" ] || [ "$(sed -n 2p "$OUT/stamp" 2>/dev/null)" = "$bin_stamp" ]; } &&
	{ [ -z "$EXTRA" ] || [ "$(sed -n 3p "$OUT/stamp" 2>/dev/null)" = "$extra_stamp" ]; }; then
	exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (the initramfs needs a /dev/console device node)"
command -v cpio >/dev/null || die "cpio not installed (apt-get install cpio); without it the initramfs is empty and the guest panics"
{ [ -x /bin/busybox ] && dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed"; } ||
	die "busybox-static not installed (apt-get install busybox-static): the guest has no libc"

mkdir -p "$OUT"
# Absolute: the initramfs is written from inside its root directory.
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'exit 1' INT TERM

# --- kernel -----------------------------------------------------------------
# linux-image-cloud-amd64 is a metapackage; the kernel itself is in the
# package it depends on (linux-image-6.1.0-N-cloud-amd64). Read that name from
# the downloaded metapackage so the two always match.
log "downloading the cloud kernel"
mkdir "$WORK/deb"
# APT::Sandbox::User=root: the _apt user cannot write into our 0700 temp dir.
(cd "$WORK/deb" && apt-get -q -o APT::Sandbox::User=root download linux-image-cloud-amd64 >/dev/null) ||
	die "apt-get download linux-image-cloud-amd64 failed (run apt-get update?)"
meta=$(ls "$WORK"/deb/linux-image-cloud-amd64_*.deb)
image=$(dpkg-deb -f "$meta" Depends | tr ',' '\n' | sed -n 's/^ *\(linux-image-[0-9][^ (|]*\).*/\1/p' | head -n1)
[ -n "$image" ] || die "cannot find the kernel image package in the Depends of $(basename "$meta")"
(cd "$WORK/deb" && apt-get -q -o APT::Sandbox::User=root download "$image" >/dev/null) ||
	die "apt-get download $image failed"
dpkg -x "$WORK"/deb/"$image"_*.deb "$WORK/kernel"
# The first in the glob's order (there is one): the loop only picks it.
for vmlinuz in "$WORK"/kernel/boot/vmlinuz-*; do break; done
[ -s "$vmlinuz" ] || die "no vmlinuz in $image"
kver=${vmlinuz##*/vmlinuz-}

# --- initramfs --------------------------------------------------------------
R="$WORK/root"
mkdir -p "$R/bin" "$R/dev" "$R/proc" "$R/sys" "$R/tmp" "$R/lib/modules"
cp /bin/busybox "$R/bin/busybox"
if [ -n "$GUEST_BIN" ]; then
	cp "$GUEST_BIN" "$R/bin/vgpu-probe"
	chmod 755 "$R/bin/vgpu-probe"
fi
ln -s busybox "$R/bin/sh"
# Laid over the root before init is written, so that it cannot replace it.
[ -z "$EXTRA" ] || cp -a "$EXTRA/." "$R/"
# The kernel opens /dev/console for init's stdio before anything is mounted.
mknod -m 600 "$R/dev/console" c 5 1

# virtio-serial needs these, in this order (each needs the ones before): copy them
# if the kernel package has them. Debian 12 ships them uncompressed.
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_console; do
	f=$(find "$WORK/kernel/lib/modules/$kver" -name "$m.ko" 2>/dev/null | head -n1)
	if [ -n "$f" ]; then
		cp "$f" "$R/lib/modules/"
		echo "$m" >>"$R/lib/modules/order"
	fi
done

cat >"$R/init" <<'EOF'
#!/bin/sh
# vgpu-probe test guest init. PID 1 must never exit: the kernel panics.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
ncpu=$(grep -c '^processor' /proc/cpuinfo)
busy=0
virtio=0
job=0
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	vgpu.busy=1) busy=1 ;;
	vgpu.virtio=1) virtio=1 ;;
	vgpu.job=*) job=1 virtio=1 ;;
	esac
done
if [ "$virtio" = 1 ] && [ -f /lib/modules/order ]; then
	for m in $(cat /lib/modules/order); do insmod "/lib/modules/$m.ko"; done
fi
if [ "$busy" = 1 ]; then
	i=0
	while [ "$i" -lt "$ncpu" ]; do
		(while :; do :; done) &
		i=$((i + 1))
	done
fi
# The host's hint page, when the domain has the ivshmem device that carries
# it: exposed read-only at /dev/shm/vgpu-probe-hints for the job's loop
# (HYBRIDSYNC_HINTS). A page the host does not publish yet is exposed all
# the same; readers fall back until it appears.
if [ -x /bin/vgpu-probe ] && grep -qx 0x1110 /sys/bus/pci/devices/*/device 2>/dev/null; then
	mkdir -p /dev/shm
	mount -t tmpfs -o mode=1777 tmpfs /dev/shm
	/bin/vgpu-probe guest --once || echo "vgpu-probe-guest: no hint page (vgpu-probe guest failed)"
fi
echo "vgpu-probe-guest: ready cpus=$ncpu busy=$busy"
if [ "$job" = 1 ]; then
	# The job talks to the host over virtio-serial; its errors go to the
	# console (the serial log) too. Power off when it is done, so the
	# domain (on_poweroff=destroy) goes away by itself.
	if [ -x /bin/vgpu-probe ]; then
		/bin/vgpu-probe vm-job || echo "vgpu-probe-guest: job failed"
	else
		echo "vgpu-probe-guest: no /bin/vgpu-probe in this image (build it with make vmimage)"
	fi
	poweroff -f
fi
while :; do sleep 3600; done
EOF
chmod 755 "$R/init"

find "$R" -exec touch -h -d @0 {} +
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet | gzip -n -6 >"$WORK/initramfs.cpio.gz")
[ -s "$WORK/initramfs.cpio.gz" ] || die "empty initramfs"

# Publish: files first, stamp last, so a half-built cache is never "done".
cp "$vmlinuz" "$WORK/vmlinuz"
chmod 644 "$WORK/vmlinuz" "$WORK/initramfs.cpio.gz"
mv -f "$WORK/vmlinuz" "$OUT/vmlinuz"
mv -f "$WORK/initramfs.cpio.gz" "$OUT/initramfs.cpio.gz"
echo "$image $kver" >"$OUT/kernel.version"
printf '%s\n%s\n%s\n' "$stamp" "$bin_stamp" "$extra_stamp" >"$OUT/stamp"
log "built $OUT (kernel $kver, initramfs $(du -k "$OUT/initramfs.cpio.gz" | cut -f1) KiB)"
