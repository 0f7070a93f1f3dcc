# vmtest: timeout=90 disks
# Local disks chosen by stable identity, never by node name: a virtio
# disk by its serial and a SCSI disk by its WWN become Ready with ext4.
# Removing the manifests unmounts them; the disks stay, data on them.

by_serial() {
	local b
	for b in /sys/block/*; do [ "$(cat $b/serial 2>/dev/null)" = VOLSERIAL1 ] && echo /dev/${b##*/}; done
}
by_wwn() {
	local b
	for b in /sys/block/sd*; do grep -qi 5000c500aaaabbbb $b/device/wwid 2>/dev/null && echo /dev/${b##*/}; done
}
has() { [ -n "$("$@")" ]; }
wait_until 20 has by_serial || fail "the VM has no disk with serial VOLSERIAL1 (qemu virtio-blk-pci,serial=)"
wait_until 20 has by_wwn || fail "the VM has no disk with WWN 0x5000c500aaaabbbb (qemu scsi-hd,wwn=)"
SER=$(by_serial)
WWN=$(by_wwn)
log "serial VOLSERIAL1 is $SER, WWN 0x5000c500aaaabbbb is $WWN"

agent_up
manifest ds "device: {serial: VOLSERIAL1}"
manifest dw "device: {wwn: \"0x5000c500aaaabbbb\"}"
ready 60 ds dw
[ "$(readlink -f "$(vfield ds device)")" = $SER ] || fail "ds is on '$(vfield ds device)', want $SER"
[ "$(readlink -f "$(vfield dw device)")" = $WWN ] || fail "dw is on '$(vfield dw device)', want $WWN"
for v in ds dw; do
	fstype=$(awk -v p=$MNT/$v '$2 == p { print $3 }' /proc/mounts)
	[ "$fstype" = ext4 ] || fail "$MNT/$v is '$fstype', want ext4"
done
check_rw $MNT/ds device-serial
check_rw $MNT/dw device-wwn

rm_manifest ds
rm_manifest dw
wait_until 60 gone ds || fail "ds still listed 60s after its manifest was removed"
wait_until 60 gone dw || fail "dw still listed 60s after its manifest was removed"
expect_count "mounts under $VT_DIR" "$(mounts_under $VT_DIR)" 0
[ -b $SER ] && [ -b $WWN ] || fail "a local disk is gone after teardown"
mkdir -p $VT_DIR/check
mount -o ro $SER $VT_DIR/check && [ "$(cat $VT_DIR/check/vmtest.txt)" = device-serial ] ||
	fail "$SER does not hold the data written through ds"
umount $VT_DIR/check
agent_stop
