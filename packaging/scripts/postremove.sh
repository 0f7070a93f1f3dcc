#!/bin/sh
# volumed, after its files are gone: .deb postrm and .rpm %postun.
# /var/lib/volumed is kept, even on purge: its staging directories may still
# be mount points of volumes with data on them.
set -e

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload || :
fi
exit 0
