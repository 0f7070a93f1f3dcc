#!/bin/bash
# Builds the test/os base image (image_test.go runs it; by hand:
# test/os/build-image.sh OUT_DIR volumed_*.deb PACKAGES test/os/guest INIT,
# INIT built from test/os/guest/initramfs.go):
# Debian 12 from Debian's mirror with mmdebstrap, systemd as PID 1, the
# volumed package installed as an operator would, and the guest side of the
# harness. Leaves OUT_DIR/{vmlinuz,initrd,disk.img}; about 30 s to 2 min by
# the machine's load.
set -euo pipefail
out=$(readlink -f "$1") deb=$(readlink -f "$2") pkgs=$3 guest=$(readlink -f "$4") init=$(readlink -f "$5")
rm -rf "$out/root"
# What the build does not need to pay for (docs/performance.md, "Round 4 of
# the tier's cost"): dpkg's fsync of every file (the image is made whole or
# not at all), documentation, manual pages and translations, usrmerge and
# the perl it pulls in (merged-usr sets /usr up as debootstrap does), and
# Debian's initramfs, which no guest boots (guest/initramfs.go):
# update-initramfs is diverted to true while the packages install and put
# back by customize.sh.
mmdebstrap --quiet --variant=minbase --include="$pkgs" \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--dpkgopt=force-unsafe-io \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	--essential-hook='chroot "$1" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs && ln -s /bin/true "$1/usr/sbin/update-initramfs"' \
	--customize-hook="'$guest/customize.sh' \"\$1\" '$deb' '$guest'" \
	bookworm "$out/root"
cp "$out"/root/boot/vmlinuz-* "$out/vmlinuz"
# The initramfs: INIT as /init and the virtio modules it loads, in
# modprobe's order of their dependencies.
kver=$(basename "$out"/root/lib/modules/*)
ird=$out/root/tmp/initramfs
mkdir -p "$ird/dev" "$ird/proc" "$ird/sys" "$ird/root" "$ird/modules"
mknod -m 600 "$ird/dev/console" c 5 1
install -m 0755 "$init" "$ird/init"
n=10
for ko in $(chroot "$out/root" modprobe -a -S "$kver" --show-depends virtio_pci virtio_blk | awk '$1 == "insmod" && !seen[$2]++ {print $2}'); do
	cp "$out/root$ko" "$ird/modules/$n-$(basename "$ko")"
	n=$((n + 1))
done
[ "$n" -gt 11 ] || { echo "build-image.sh: no virtio modules for $kver" >&2; exit 1; }
chroot "$out/root" sh -c 'cd /tmp/initramfs && find . | cpio --quiet -o -H newc' >"$out/initrd"
rm -rf "$ird"
truncate -s 3G "$out/disk.img"
mkfs.ext4 -q -F -L ostest-root -d "$out/root" "$out/disk.img"
rm -rf "$out/root"
