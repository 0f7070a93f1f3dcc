# vmtest: timeout=120
# An NVMe namespace and an iSCSI LUN grow on the target. Once the host
# sees it (namespace revalidation; a SCSI rescan), the agent grows the
# filesystems online and reports the larger capacity; data stays.

NQN=nqn.2024-01.io.example:grow
IQN=iqn.2024-01.io.example:grow
both_targets $NQN $IQN

FS_OPTS=", grow: true"
AGENT_ARGS="--resync 5s"
agent_up
nvme_manifest gn $NQN 1
iscsi_manifest gi $IQN 0
ready 60 gn gi
check_rw $MNT/gn grow-nvme
check_rw $MNT/gi grow-iscsi
CN=$(vfield gn capacityBytes)
CI=$(vfield gi capacityBytes)
[ "${CN:-0}" -gt 0 ] && [ "${CI:-0}" -gt 0 ] || fail "no capacityBytes in the status: gn '$CN', gi '$CI'"
log "capacity before: gn $CN, gi $CI"

# grow_loop DEV SIZE_MB: the file behind a loop device, and the device.
grow_loop() {
	truncate -s ${2}M "$(cat /sys/block/${1#/dev/}/loop/backing_file)" && losetup -c $1 || fail "grow $1"
}
grow_loop "$(nvmet_loop $NQN 1)" 160
echo 1 > $NVMET/subsystems/$NQN/namespaces/1/revalidate_size || fail "nvmet revalidate_size"
grow_loop "$(lio_loop $IQN 0)" 160
sd=$(readlink -f "$(vfield gi device)")
echo 1 > /sys/block/${sd#/dev/}/device/rescan || fail "rescan $sd"

grown() { [ "$(vfield $1 capacityBytes)" -gt $2 ] 2>/dev/null; }
wait_until 60 grown gn $CN || fail "gn's capacity is still $(vfield gn capacityBytes) 60s after its namespace grew (was $CN)"
wait_until 60 grown gi $CI || fail "gi's capacity is still $(vfield gi capacityBytes) 60s after its LUN grew (was $CI)"
log "capacity after: gn $(vfield gn capacityBytes), gi $(vfield gi capacityBytes)"
check_has $MNT/gn grow-nvme
check_has $MNT/gi grow-iscsi
check_rw $MNT/gn grow-nvme-after
check_rw $MNT/gi grow-iscsi-after

rm_manifest gn
rm_manifest gi
wait_until 60 gone gn || fail "gn still listed 60s after its manifest was removed"
wait_until 60 gone gi || fail "gi still listed 60s after its manifest was removed"
agent_stop
