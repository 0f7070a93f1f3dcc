# vmtest: timeout=120
# The iSCSI target the host booted from (an iBFT fixture under
# --firmware-root, as the kernel would show it) is pinned: a volume on it
# comes up, but neither the removal of its manifest nor `shutdown
# --network` logs it out or unmounts it. The status names the boot target
# and the initiator name the firmware gave.

IQN=iqn.2024-01.io.example:boot
lio_target $IQN 1 64
lio_portal $IQN 127.0.0.1:3260

FW=$VT_DIR/fw
T=$FW/sys/firmware/ibft
mkdir -p $T/initiator $T/target0 || fail "iBFT fixture"
echo iqn.2024-01.io.example:from-ibft > $T/initiator/initiator-name
echo 0 > $T/target0/index
echo 3 > $T/target0/flags # valid, boot selected
echo 127.0.0.1 > $T/target0/ip-addr
echo 3260 > $T/target0/port
echo $IQN > $T/target0/target-name
echo 0 > $T/target0/lun
echo 0 > $T/target0/nic-assoc

AGENT_ARGS="--firmware-root $FW"
agent_up
table=$($VOLUMED status --socket $SOCK)
echo "$table" | grep -q "booted from: *ibft target0, $IQN" || fail "status does not show the boot target: $table"
echo "$table" | grep -q "iSCSI initiator: iqn.2024-01.io.example:from-ibft (ibft)" || fail "status does not show the firmware's initiator name: $table"

iscsi_manifest boot $IQN 0
ready 60 boot
check_rw $MNT/boot boot-data
[ "$(vfield boot pinned)" = true ] || fail "boot is not shown pinned: $(vstatus boot)"
$VOLUMED status --socket $SOCK boot | grep -q "^Pinned: *yes" || fail "status boot does not say pinned: $($VOLUMED status --socket $SOCK boot)"
grep -q "from-ibft" /sys/class/iscsi_session/session*/initiatorname 2>/dev/null ||
	log "note: the session's initiator name is $(cat /sys/class/iscsi_session/session*/initiatorname 2>/dev/null)"

rm_manifest boot
wait_until 30 check_pinned_note || fail "no pinned note after the manifest went: $(vstatus boot)"
mounted $MNT/boot || fail "a pinned volume was unmounted when its manifest went"
expect_count "sessions to the boot target" "$(iscsi_sessions $IQN)" 1

out=$($VOLUMED shutdown --network --socket $SOCK --timeout 60s 2>&1) || fail "shutdown --network: $out"
echo "$out" | grep -q "pinned" || fail "shutdown --network does not report the pinned volume: $out"
mounted $MNT/boot || fail "shutdown --network unmounted a pinned volume"
expect_count "sessions to the boot target after shutdown --network" "$(iscsi_sessions $IQN)" 1
check_has $MNT/boot boot-data
agent_stop
