#!/usr/bin/env bash
# CI setup for bpf/ and agent/: clang and llvm-strip, so `make bpf-check`
# can regenerate the committed bpf2go output and compare. The agent's tests
# themselves need only root and a kernel with BPF (they load the committed
# object), plus /bin/sh and perl (perl-base is essential on Debian), which
# every Debian has. Idempotent; assumes apt-get update ran. An argument
# (e.g. "down") means teardown, and there is nothing to tear down here.
set -euo pipefail
[ "$#" -eq 0 ] || exit 0
export DEBIAN_FRONTEND=noninteractive
need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v llvm-strip >/dev/null 2>&1 || need+=(llvm)
if [ "${#need[@]}" -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi
clang --version | head -n1
# What the agent tests need from the kernel; print it so a skip or failure
# in the log can be read against it.
[ -r /sys/kernel/btf/vmlinux ] && echo "BTF: /sys/kernel/btf/vmlinux" || echo "BTF: missing (CO-RE relocation will fail)"
