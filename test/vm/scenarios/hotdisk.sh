# vmtest: timeout=90 disks
# A disk volume whose selector matches no disk waits and says why; the
# host then hot-adds a SCSI disk through qemu's monitor (drive_add and
# device_add on the VM's virtio-scsi controller) and volumed, woken by
# the add uevent (its resync is 10 minutes away), formats and mounts it.
# The disk has a serial but no WWN (no wwn=): its sysfs wwid fails with
# EINVAL, which once cost volumed the serial too.

AGENT_ARGS="--resync 10m"
agent_up
manifest hd "disk: {match: 'disk.serial == \"VOLHOT1\"'}"
waits() { vfield hd lastError | grep -q "no disk matches"; }
wait_until 20 waits || fail "hd does not say it waits for a disk: phase $(vfield hd phase), $(vfield hd lastError)"
[ "$(vfield hd phase)" != Ready ] || fail "hd is Ready with no disk VOLHOT1"
log "hd waits: $(vfield hd lastError)"

echo "VMTEST-HOST drive_add 0 file=@DISKS@/hot.img,if=none,id=hot1,format=raw"
echo "VMTEST-HOST device_add scsi-hd,bus=scsi0.0,drive=hot1,serial=VOLHOT1,id=hotdisk1"
t0=$(now)
ready 30 hd
log "hd Ready $(awk "BEGIN { print $(now) - $t0 }")s after device_add"
S=$(vfield hd device)
case $S in /dev/sd[a-z]) ;; *) fail "hd is on '$S', not a SCSI disk" ;; esac
[ "$(blockdev --getsize64 $S)" = $((48 << 20)) ] || fail "hd is on $S of $(blockdev --getsize64 $S) bytes, not the 48 MiB disk added"
check_rw $MNT/hd hotdisk-data
# Its retry backoff would find the disk too, in time: the log says what woke it.
grep -q '"kernel event: retrying waiting volumes now","reason":"block device added: '${S#/dev/}'","volumes":\["hd"\]' $ALOG ||
	fail "the agent log has no retry of hd woken by the add uevent of $S"

rm_manifest hd
wait_until 30 gone hd || fail "hd still listed 30s after its manifest was removed"
agent_stop
echo "VMTEST-HOST device_del hotdisk1"
gone_dev() { [ ! -e /sys/block/${S#/dev/} ]; }
wait_until 20 gone_dev || fail "$S still there 20s after device_del"
