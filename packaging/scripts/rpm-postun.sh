#!/bin/sh
# .rpm %postun: the library is gone or replaced; the unit file too.
ldconfig
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
