#!/bin/sh
# volumed, before its files go: .deb prerm (remove, upgrade, ...) and .rpm
# %preun (0: erase, 1 or more: upgrade). Only a removal does anything.
#
# The network volumes are taken down now, while the agent and the network
# are up: with the binary gone, nothing could do it at the next poweroff.
# Local volumes stay mounted, as after any stop of the agent.
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
command -v systemctl >/dev/null 2>&1 || exit 0

if [ -d /run/systemd/system ]; then
	systemctl stop volumed-network.service || :
	systemctl stop volumed.service || :
fi
systemctl disable volumed.service volumed-network.service || :
exit 0
