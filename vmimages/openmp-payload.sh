#!/bin/sh
# openmp-payload.sh HS_BUILD OUTDIR: the files an OpenMP program under
# hybridsync-run needs in the test guest, as a tree to lay over the
# initramfs (build.sh's VGPU_GUEST_EXTRA). The guest has no libc of its
# own, so the tree carries what the dynamic loader needs:
#   /bin/ompbarrier        libhybridsync/testdata/programs/ompbarrier.c
#                          built with gcc -fopenmp, without CUDA
#   /opt/hybridsync/bin/   hybridsync-run and hybridsync-openmp (make lib)
#   /opt/hybridsync/lib/   libhybridsync.so.N, the name the launcher looks for
#   /lib64, /lib/...       the loader and every library ldd lists for the
#                          three, from this host (GNU libgomp, glibc)
# HS_BUILD is make lib's output directory (build). The default image
# (make vmimage) has none of this; make vmimage-openmp builds the image
# that has it, for make e2e's OpenMP test.
set -eu

log() { echo "openmp-payload: $*" >&2; }
die() { log "error: $*"; exit 1; }

[ $# -eq 2 ] || die "usage: $0 HS_BUILD OUTDIR"
HS=$1
OUT=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
PROGS=$HERE/libhybridsync/testdata/programs
for f in "$HS/bin/hybridsync-run" "$HS/bin/hybridsync-openmp"; do
	[ -x "$f" ] || die "$f missing: run make lib first"
done
# The soname the launcher looks for, read from its own script.
soname=$(sed -n "s/^soname='\(.*\)'$/\1/p" "$HS/bin/hybridsync-run")
{ [ -n "$soname" ] && [ -f "$HS/lib/$soname" ]; } || die "no library named by $HS/bin/hybridsync-run in $HS/lib"
command -v gcc >/dev/null || die "gcc not installed"

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/opt/hybridsync/bin" "$OUT/opt/hybridsync/lib"
gcc -O2 -Wall -Werror -fopenmp -DOMPBARRIER_NO_CUDA -I"$PROGS" -o "$OUT/bin/ompbarrier" "$PROGS/ompbarrier.c" ||
	die "cannot build ompbarrier with gcc -fopenmp (is libgomp's gcc support installed?)"
cp "$HS/bin/hybridsync-run" "$HS/bin/hybridsync-openmp" "$OUT/opt/hybridsync/bin/"
# A copy, not the links: the launcher follows its own path only.
cp -L "$HS/lib/$soname" "$OUT/opt/hybridsync/lib/$soname"

# Each library at the path ldd resolved it to on this host: the guest's
# loader searches the same default directories (/lib/x86_64-linux-gnu on
# Debian), and the programs name the loader by its absolute path.
libs=$(for f in "$OUT/bin/ompbarrier" "$OUT/opt/hybridsync/bin/hybridsync-openmp" "$OUT/opt/hybridsync/lib/$soname"; do
	ldd "$f" || die "ldd $f failed"
done | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | LC_ALL=C sort -u)
[ -n "$libs" ] || die "ldd listed no libraries"
for lib in $libs; do
	mkdir -p "$OUT$(dirname "$lib")"
	cp -L "$lib" "$OUT$lib"
done
case $libs in
*libgomp*) ;;
*) die "ompbarrier does not use libgomp: $libs" ;;
esac
log "$OUT: ompbarrier, hybridsync-run, $soname and $(echo "$libs" | wc -l) libraries ($(du -sk "$OUT" | cut -f1) KiB)"
