#!/usr/bin/env bash
# The one place that installs what volumed's demo and tests need (make deps;
# make demo and make test run it first).
#
#   scripts/deps.sh [demo|test]    (default: test)
#
# On Debian or Ubuntu as root it apt-installs the packages that are missing,
# and says nothing when none is. Anywhere else (another distribution, or
# not root) it names each missing command and the Debian package that
# gives it, and exits 1. Go itself is not installed here (README).
#
# VOLUMED_OS_RELEASE (default /etc/os-release), VOLUMED_APT_LISTS (default
# /var/lib/apt/lists) and VOLUMED_SBIN (the sbin directories searched besides
# PATH) exist for scripts/deps_test.go.
set -euo pipefail

what=${1:-test}

# package:command — the command proves the package is there where dpkg
# cannot be asked. The demo needs the first four. losetup is mount's, not
# util-linux's (which every Debian has): a root without systemd, which
# depends on mount, lacks it.
demo_pkgs="e2fsprogs:mkfs.ext4 xfsprogs:mkfs.xfs btrfs-progs:mkfs.btrfs mount:losetup"
# dosfstools, fdisk, gdisk: the signature probes format and partition images.
# prometheus: the alert rules are checked with promtool and run in a real
# Prometheus. rpm and systemd: packaging/ lists the .rpm and runs
# systemd-analyze verify and systemd-tmpfiles on the units (no systemd needs
# to be running). qemu-system-x86, busybox-static, kmod, iproute2: test/vm
# boots a VM whose initramfs holds busybox, kernel modules (resolved with
# modprobe/depmod) and iproute2's ip; python3 unpacks the kernel image to
# boot it faster. man-db: the man pages are checked with man -l. zsh: the
# zsh completion is loaded in a test. cryptsetup-bin: drivers/luks formats
# image files with it, and test/vm copies it into the VM. swtpm, swtpm-tools:
# a software TPM2 that drivers/tpm2 and drivers/luks seal to, and that test/vm
# attaches to qemu (swtpm-tools brings swtpm_setup, which the package's own
# setup wants). lvm2: the tests of volumed wipe write an LVM label with
# pvcreate (it needs no device-mapper for that). mmdebstrap, qemu-utils:
# test/os builds a Debian image and boots copy-on-write overlays of it (qemu-img).
test_pkgs="$demo_pkgs dosfstools:mkfs.vfat fdisk:sfdisk gdisk:sgdisk prometheus:prometheus rpm:rpm
  systemd:systemd-analyze qemu-system-x86:qemu-system-x86_64 busybox-static:busybox kmod:modprobe
  iproute2:ip python3:python3 man-db:man zsh:zsh cryptsetup-bin:cryptsetup swtpm:swtpm
  swtpm-tools:swtpm_setup lvm2:pvcreate mmdebstrap:mmdebstrap qemu-utils:qemu-img"
# tang-common, clevis-luks: drivers/tang and drivers/luks bind keys to a real
# tangd (/usr/libexec/tangd, run per connection by the test) and check that
# Clevis opens what volumed bound and the reverse (clevis-luks brings clevis,
# jose and curl). tang-common, not tang: tang's unit would serve port 80.
test_pkgs="$test_pkgs tang-common:tang-show-keys clevis-luks:clevis-luks-bind"
# clevis-tpm2, tpm2-tools: drivers/tpm2pin and drivers/luks check that Clevis'
# tpm2 pin (which runs tpm2-tools against swtpm) opens what volumed sealed,
# alone and as a share of a threshold, and the reverse.
test_pkgs="$test_pkgs clevis-tpm2:clevis-encrypt-tpm2 tpm2-tools:tpm2_unseal"
# qemu-storage-daemon: test/crashcheck records a disk's every write in
# the dm-log-writes format (its blklogwrites driver) behind a FUSE export.
test_pkgs="$test_pkgs qemu-system-common:qemu-storage-daemon"

case "$what" in
  demo) pkgs=$demo_pkgs ;;
  test) pkgs=$test_pkgs ;;
  *) echo "usage: $0 [demo|test]" >&2; exit 2 ;;
esac

os_release=${VOLUMED_OS_RELEASE:-/etc/os-release}
debian=false
if [ -r "$os_release" ] && command -v dpkg >/dev/null && command -v apt-get >/dev/null; then
  # shellcheck disable=SC1090
  ids=$(. "$os_release"; echo " ${ID:-} ${ID_LIKE:-} ")
  case "$ids" in *" debian "* | *" ubuntu "*) debian=true ;; esac
fi

# Commands are looked for in the sbin directories too: mkfs and losetup live
# there, and a user's PATH often lacks them.
sbin=${VOLUMED_SBIN-/usr/local/sbin:/usr/sbin:/sbin}
has() { PATH="$PATH:$sbin" command -v "$1" >/dev/null; }

need=()
for pc in $pkgs; do
  pkg=${pc%%:*} cmd=${pc#*:}
  if $debian; then
    # busybox-static, not the dynamic busybox, is what the VM's initramfs can use.
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  else
    has "$cmd" || need+=("$pc")
  fi
done

# Installed on Debian where this release has them: their names carry an
# ABI version (libtss2-esys-3.0.2-0 in bookworm), so a release without them
# is not an error. systemd-cryptenroll dlopens tpm2-tss at run time, and a
# test of drivers/luks enrols a volume with it against swtpm. systemd 252
# dlopens libtss2-esys.so.0, libtss2-rc.so.0 and libtss2-mu.so.0, and
# libtss2-tcti-DRIVER.so.0 for --tpm2-device=DRIVER:...; no package
# depends on rc0, so without it "TPM2 support not installed"
# (internal/testtool's libraries list them; test/fresh, which builds a
# minimal Debian root with mmdebstrap, runs this script in it and checks).
opt_pkgs="libtss2-esys-3.0.2-0 libtss2-rc0 libtss2-mu0 libtss2-tcti-swtpm0"
optional() {
  $debian && [ "$what" = test ] || return 0
  for pkg in $opt_pkgs; do
    dpkg -s "$pkg" >/dev/null 2>&1 && continue
    [[ " ${need[*]:-} " == *" $pkg "* ]] && continue
    apt-cache show "$pkg" >/dev/null 2>&1 && need+=("$pkg")
  done
  return 0
}
optional

lists=${VOLUMED_APT_LISTS:-/var/lib/apt/lists}
# test/vm fetches (never installs) a Debian kernel and open-iscsi with
# `apt-get download`, which needs package lists.
need_lists=false
if $debian && [ "$what" = test ] && ! compgen -G "$lists/*_Packages*" >/dev/null; then
  need_lists=true
fi

if [ ${#need[@]} -eq 0 ] && ! $need_lists; then
  exit 0
fi

if $debian && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  echo "deps: apt-get install ${need[*]:-(package lists only)}" >&2
  apt-get update -qq
  optional # the lists may have been missing before
  if [ ${#need[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  fi
  exit 0
fi

if $debian; then
  if [ ${#need[@]} -gt 0 ]; then
    echo "deps: missing Debian packages: ${need[*]}" >&2
    echo "deps: run as root (sudo make deps), or: sudo apt-get install --no-install-recommends ${need[*]}" >&2
  else
    echo "deps: no apt package lists in $lists (test/vm needs them): sudo apt-get update" >&2
  fi
  exit 1
fi

echo "deps: not Debian or Ubuntu, so nothing is installed; missing commands:" >&2
for pc in "${need[@]}"; do
  printf '  %-20s (Debian package %s)\n' "${pc#*:}" "${pc%%:*}" >&2
done
echo "deps: install them with your distribution's package manager, then run this again" >&2
exit 1
