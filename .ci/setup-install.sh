#!/usr/bin/env bash
# CI setup for `make install` (cmd/vgpu-probe/install_test.go): groff to
# format the installed man pages, and bash-completion, whose helpers the
# generated bash completion calls when it completes a word. Idempotent;
# assumes apt-get update ran.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
command -v groff >/dev/null 2>&1 || need+=(groff-base)
[ -f /usr/share/bash-completion/bash_completion ] || need+=(bash-completion)
if [ ${#need[@]} -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi
