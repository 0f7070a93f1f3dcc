# vmtest: timeout=150
# `volumed shutdown --network` (the ExecStop of volumed-network.service at
# poweroff) unpublishes, unmounts, disconnects and logs out the NVMe and
# iSCSI volumes while the network is up, keeps them down, and leaves a
# local volume alone; `--undo` brings them back with their data; stopping
# the agent afterwards unmounts nothing.

NQN=nqn.2024-01.io.example:shutdown
IQN=iqn.2024-01.io.example:shutdown
both_targets $NQN $IQN

AGENT_ARGS="--resync 2s"
agent_up
nvme_manifest sn $NQN 1
iscsi_manifest si $IQN 0
manifest loc "loop: {file: $VT_DIR/loc.img, create: {size: 64Mi}}"
ready 90 sn si loc
check_rw $MNT/sn sn-data
check_rw $MNT/si si-data
check_rw $MNT/loc loc-data

out=$($VOLUMED shutdown --network --socket $SOCK --timeout 60s 2>&1) || fail "shutdown --network: $out"
log "shutdown --network: $out"
mounted $MNT/sn && fail "$MNT/sn still mounted after shutdown --network"
mounted $MNT/si && fail "$MNT/si still mounted after shutdown --network"
expect_count "NVMe controllers after shutdown --network" "$(nvme_ctrls $NQN)" 0
expect_count "iSCSI sessions after shutdown --network" "$(iscsi_sessions $IQN)" 0
check_has $MNT/loc loc-data
# Held down across resyncs.
sleep 5
mounted $MNT/sn && fail "a resync set $MNT/sn up again while held down"
expect_count "iSCSI sessions while held down" "$(iscsi_sessions $IQN)" 0

$VOLUMED shutdown --network --undo --socket $SOCK || fail "shutdown --network --undo"
ready 90 sn si
check_has $MNT/sn sn-data
check_has $MNT/si si-data

agent_stop
mounted $MNT/sn && mounted $MNT/si && mounted $MNT/loc || fail "stopping the agent unmounted something"
