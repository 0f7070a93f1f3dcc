#!/bin/bash
# Builds the test/os base image (image_test.go runs it; by hand:
# test/os/build-image.sh OUT_DIR volumed_*.deb PACKAGES test/os/guest):
# Debian 12 from Debian's mirror with mmdebstrap, systemd as PID 1, the
# volumed package installed as an operator would, and the guest side of the
# harness. Leaves OUT_DIR/{vmlinuz,initrd,disk.img}; about 30 s to 2 min by
# the machine's load.
set -euo pipefail
out=$(readlink -f "$1") deb=$(readlink -f "$2") pkgs=$3 guest=$(readlink -f "$4")
rm -rf "$out/root"
mmdebstrap --quiet --variant=minbase --include="$pkgs" \
	--customize-hook="'$guest/customize.sh' \"\$1\" '$deb' '$guest'" \
	bookworm "$out/root"
cp "$out"/root/boot/vmlinuz-* "$out/vmlinuz"
cp "$out"/root/boot/initrd.img-* "$out/initrd"
truncate -s 3G "$out/disk.img"
mkfs.ext4 -q -F -L ostest-root -d "$out/root" "$out/disk.img"
rm -rf "$out/root"
