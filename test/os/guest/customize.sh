#!/bin/bash
# mmdebstrap's customize hook for build-image.sh: customize.sh ROOT DEB GUEST_DIR.
set -euo pipefail
root=$1 deb=$2 guest=$3

# dpkg's defaults back (mmdebstrap leaves build-image.sh's --dpkgopt in
# the root): the package gets its manual pages, and a test's dpkg -i
# syncs what it writes, as on a host.
rm "$root/etc/dpkg/dpkg.cfg.d/99mmdebstrap"

# The package, installed as an operator would (its postinst enables the
# units; no systemd runs here, so nothing starts).
cp "$deb" "$root/tmp/volumed.deb"
chroot "$root" dpkg -i /tmp/volumed.deb
rm "$root/tmp/volumed.deb"

echo root:root | chroot "$root" chpasswd
echo ostest >"$root/etc/hostname"
install -m 0755 "$guest/ostest-seed" "$root/usr/lib/systemd/system-generators/ostest-seed"
install -D -m 0644 "$guest/lib.sh" "$root/usr/lib/ostest/lib.sh"

# The journal is kept on disk: a test reads the previous boot's (its
# shutdown) on the next boot or from the disk image on the host.
mkdir -p "$root/var/log/journal" "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=persistent\nRateLimitBurst=0\n' >"$root/etc/systemd/journald.conf.d/ostest.conf"

# What no test needs and every boot would pay for under TCG: logins,
# clock sync, periodic jobs, LVM's monitoring (lvm2 is there for its tools),
# binfmt, hugepages, POSIX queues, debugfs and tracefs, fuse, utmp (each
# about a second of the one emulated CPU per boot); /run/nologin (no
# logins), the random seed (virtio-rng seeds the kernel), system users
# (the packages' scripts made them) and the root's remount (the initramfs
# mounts it read-write and fstab has no line for it).
for u in getty@tty1.service serial-getty@ttyS0.service systemd-timesyncd.service \
	apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
	fstrim.timer man-db.timer dpkg-db-backup.timer systemd-tmpfiles-clean.timer \
	lvm2-monitor.service lvm2-lvmpolld.socket dm-event.socket dm-event.service \
	systemd-pstore.service getty-static.service ifupdown-pre.service \
	nvmf-autoconnect.service nvmefc-boot-connections.service \
	systemd-binfmt.service proc-sys-fs-binfmt_misc.automount dev-hugepages.mount \
	dev-mqueue.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
	modprobe@fuse.service sys-fs-fuse-connections.mount \
	systemd-update-utmp.service systemd-update-utmp-runlevel.service \
	systemd-user-sessions.service systemd-random-seed.service systemd-sysusers.service \
	systemd-remount-fs.service; do
	ln -sf /dev/null "$root/etc/systemd/system/$u"
done
# The same for systemd's generators that have nothing to do here (each a
# process at every boot, about 0.2 s of emulated CPU): the fstab and
# cryptsetup generators stay, TestUdevInTheLoop checks what they do.
mkdir -p "$root/etc/systemd/system-generators"
for g in systemd-debug-generator systemd-getty-generator systemd-gpt-auto-generator \
	systemd-hibernate-resume-generator systemd-integritysetup-generator \
	systemd-veritysetup-generator systemd-rc-local-generator systemd-run-generator \
	systemd-system-update-generator systemd-sysv-generator; do
	ln -sf /dev/null "$root/etc/systemd/system-generators/$g"
done
# ifupdown is there for TestLifecycle's network, which its unit asks for
# (Wants=networking.service); every other boot would run ifup and its
# hook scripts for the loopback, which systemd brings up by itself.
rm -f "$root/etc/systemd/system/multi-user.target.wants/networking.service" \
	"$root/etc/systemd/system/network-online.target.wants/networking.service"
# nvme-cli is there for its tool; its boot units would load nvme-fabrics
# for volumed, which must work on a host without nvme-cli.
# ifupdown-pre waits for udev to settle before networking.service: whole
# seconds under TCG, for hotplug interfaces the guest does not have.

# Modules udev's coldplug would load for devices of the emulated machine
# that no test uses: KVM (qemu64 shows SVM), the PIIX IDE controller's ATA
# drivers, the PS/2 port's raw device, evdev and fw_cfg's sysfs files.
printf 'blacklist %s\n' kvm kvm_amd kvm_intel irqbypass ata_piix ata_generic libata \
	serio_raw evdev qemu_fw_cfg >"$root/etc/modprobe.d/ostest.conf"

# Debian's initramfs is not built (build-image.sh diverts update-initramfs
# while the packages install): the guests boot guest/initramfs.go. The
# real one is put back for what an operator's host would run.
rm "$root/usr/sbin/update-initramfs"
chroot "$root" dpkg-divert --quiet --local --rename --remove /usr/sbin/update-initramfs

# open-iscsi's units stay as Debian ships them (an operator's host has
# them): its boot-time logins and shutdown logouts run beside volumed's.
