# vmtest: timeout=90 disks
# A disk volume whose selector matches no disk waits and says why; the
# host then hot-adds a SCSI disk through qemu's monitor (drive_add and
# device_add on the VM's virtio-scsi controller) and volumed, woken by
# the add uevent (its resync is 10 minutes away), formats and mounts it.

AGENT_ARGS="--resync 10m"
agent_up
manifest hd "disk: {match: 'disk.transport == \"scsi\" && disk.size == 48 * MiB'}"
waits() { vfield hd lastError | grep -q "no disk matches"; }
wait_until 20 waits || fail "hd does not say it waits for a disk: phase $(vfield hd phase), $(vfield hd lastError)"
[ "$(vfield hd phase)" != Ready ] || fail "hd is Ready with no 48 MiB SCSI disk"
log "hd waits: $(vfield hd lastError)"

echo "VMTEST-HOST drive_add 0 file=@DISKS@/hot.img,if=none,id=hot1,format=raw"
sleep 1
echo "VMTEST-HOST device_add scsi-hd,bus=scsi0.0,drive=hot1,serial=VOLHOT1,id=hotdisk1"
t0=$(now)
ready 30 hd
$VOLUMED disks --socket $SOCK -o json | grep -i -B3 -A12 '"size": 50331648' | sed 's/^/VMTEST-LOG disks: /'
log "hd Ready $(awk "BEGIN { print $(now) - $t0 }")s after device_add"
S=$(vfield hd device)
[ -b "$S" ] || fail "hd's device '$S' is not a block device"
check_rw $MNT/hd hotdisk-data

rm_manifest hd
wait_until 30 gone hd || fail "hd still listed 30s after its manifest was removed"
agent_stop
echo "VMTEST-HOST device_del hotdisk1"
gone_dev() { [ ! -e /sys/block/${S#/dev/} ]; }
wait_until 20 gone_dev || fail "$S still there 20s after device_del"
