#!/usr/bin/env bash
# CI setup for profiler/: headless Chromium, in which the HTML report test
# opens the sample report (profiler/render/html, TestReportRendersInChromium),
# and the fonts its SVG plots name. Idempotent; assumes apt-get update ran.
# .ci/run calls every setup script; an argument (e.g. "down") means teardown,
# and there is nothing to tear down here.
set -euo pipefail
[ "$#" -eq 0 ] || exit 0
export DEBIAN_FRONTEND=noninteractive
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
dpkg -s fonts-liberation >/dev/null 2>&1 || need+=(fonts-liberation)
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)
if [ "${#need[@]}" -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${need[@]}"
fi
/usr/bin/chromium --version
