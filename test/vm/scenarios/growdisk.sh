# vmtest: timeout=90 disks
# A local disk grows under a partition volume that takes the rest of it:
# the host resizes the disk through qemu's monitor (block_resize), the
# guest kernel sees the new capacity and sends a change uevent, and
# volumed grows the last partition and its ext4 filesystem online. Data
# stays. The resync is 10 minutes away: the change uevent, which names
# the disk and not the partition the volume holds, is what wakes it.

by_serial() {
	local b
	for b in /sys/block/vd*; do [ "$(cat $b/serial 2>/dev/null)" = VOLGROW1 ] && echo /dev/${b##*/}; done
}
has() { [ -n "$("$@")" ]; }
wait_until 20 has by_serial || fail "the VM has no virtio disk with serial VOLGROW1"
D=$(by_serial)
log "disk VOLGROW1 is $D, $(blockdev --getsize64 $D) bytes"

FS_OPTS=", grow: true"
AGENT_ARGS="--resync 10m"
agent_up
manifest gp "partition: {disk: {serial: VOLGROW1}, label: gp, grow: true}"
ready 40 gp
P=$(vfield gp device)
case $P in ${D}[0-9]*) ;; *) fail "gp is on '$P', not a partition of $D" ;; esac
check_rw $MNT/gp growdisk-data
fs_kib() { df -k $MNT/gp | awk 'NR == 2 { print $2 }'; }
P0=$(blockdev --getsize64 $P)
F0=$(fs_kib)
log "before: partition $P0 bytes, filesystem $F0 KiB"

echo "VMTEST-HOST block_resize grow1 160M"
disk_is() { [ "$(blockdev --getsize64 $D)" = $((160 << 20)) ]; }
wait_until 30 disk_is || fail "$D is $(blockdev --getsize64 $D) bytes 30s after block_resize to 160M (is the monitor there?)"
log "the kernel sees $D at 160 MiB"

part_grew() { [ "$(blockdev --getsize64 $P)" -gt $((P0 + (48 << 20))) ]; }
fs_grew() { [ "$(fs_kib)" -gt $((F0 + 48 * 1024)) ]; }
wait_until 40 part_grew || fail "$P is $(blockdev --getsize64 $P) bytes 40s after its disk grew by 96 MiB (was $P0): $(vfield gp lastError)"
wait_until 40 fs_grew || fail "the filesystem on $P is $(fs_kib) KiB 40s after its disk grew (was $F0): $(vfield gp lastError)"
log "after: partition $(blockdev --getsize64 $P) bytes, filesystem $(fs_kib) KiB"
check_has $MNT/gp growdisk-data
check_rw $MNT/gp growdisk-after
agent_stop
