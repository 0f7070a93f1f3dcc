# vmtest: timeout=150
# The storage link goes down for 5 s and comes back: NVMe/TCP and iSCSI
# volumes reached over it stay (or come back) mounted and writable, and
# the agent notices the link coming back.

NQN=nqn.2024-01.io.example:flap
IQN=iqn.2024-01.io.example:flap
storage_netns
both_targets $NQN $IQN 10.99.0.1 tgt

agent_up
nvme_manifest fn $NQN 1 10.99.0.1 4420
iscsi_manifest fi $IQN 0 10.99.0.1:3260
ready 60 fn fi
check_rw $MNT/fn flap-nvme-before
check_rw $MNT/fi flap-iscsi-before

log "vh0 down"
$IP link set vh0 down || fail "ip link set vh0 down"
sleep 5
$IP link set vh0 up || fail "ip link set vh0 up"
log "vh0 up"

# Writes block while the paths recover; give them a bounded time.
wait_until 90 timeout -s KILL 30 sh -c "echo after > $MNT/fn/after.txt && echo after > $MNT/fi/after.txt && sync" ||
	fail "writes did not reach the volumes within 90s of the link coming back"
ready 60 fn fi
for d in fn fi; do
	case ",$(mount_opts $MNT/$d)," in *,ro,*) fail "$MNT/$d is mounted read-only after the flap: $(mount_opts $MNT/$d)" ;; esac
done
check_has $MNT/fn flap-nvme-before
check_has $MNT/fi flap-iscsi-before
check_rw $MNT/fn flap-nvme-after
check_rw $MNT/fi flap-iscsi-after
expect_count "controllers for $NQN" "$(nvme_ctrls $NQN)" 1
expect_count "sessions to $IQN" "$(iscsi_sessions $IQN)" 1

link_logged() { grep -i link $ALOG | grep -q vh0; }
wait_until 20 link_logged || fail "the agent's log has no line about link vh0"
log "agent: $(grep -i link $ALOG | grep vh0 | tail -n 1)"

rm_manifest fn
rm_manifest fi
wait_until 60 gone fn || fail "fn still listed 60s after its manifest was removed"
wait_until 60 gone fi || fail "fi still listed 60s after its manifest was removed"
wait_until 30 is 0 nvme_ctrls || fail "NVMe controllers left: $(nvme_ctrls)"
wait_until 30 is 0 iscsi_sessions || fail "iSCSI sessions left: $(iscsi_sessions)"
agent_stop
