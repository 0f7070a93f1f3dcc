#!/bin/sh
# volumed, after its files are in place: .deb postinst (configure
# [OLD-VERSION]) and .rpm %post (1: install, 2 or more: upgrade).
#
# Enables the units on a fresh install. Starts nothing unless systemd is
# running: in an image build (a chroot, a container) there is no systemd,
# and the agent must first run on the booted host. An upgrade restarts the
# agent if it runs, which unmounts nothing, and never touches
# volumed-network.service, whose stop takes the network volumes down.
set -e

case "$1" in
configure) if [ -n "$2" ]; then upgrade=1; else upgrade=0; fi ;;
1) upgrade=0 ;;
[2-9] | [1-9][0-9]*) upgrade=1 ;;
*) exit 0 ;; # abort-upgrade and the like: nothing was changed
esac

if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create volumed.conf || :
fi
command -v systemctl >/dev/null 2>&1 || exit 0

# /run/systemd/system exists only while systemd is PID 1 (sd_booted(3)).
running=0
if [ -d /run/systemd/system ]; then
	running=1
	systemctl daemon-reload || :
fi

if [ "$upgrade" = 0 ]; then
	# Without a running systemd, enable works on the unit files alone.
	systemctl enable volumed.service volumed-network.service || :
	if [ "$running" = 1 ]; then
		# Not waiting for READY: a first start may format images.
		systemctl --no-block start volumed.service volumed-network.service || :
	fi
elif [ "$running" = 1 ]; then
	systemctl try-restart volumed.service || :
fi
exit 0
