# vmtest: timeout=60
# The VM itself, without volumed's network drivers: the in-kernel NVMe/TCP
# and LIO targets, a raw NVMe/TCP connect, an open-iscsi login, mkfs and
# mounts; then volumed running a loop volume to Ready and back.

NQN=nqn.2024-01.io.example:smoke
IQN=iqn.2024-01.io.example:smoke

$VOLUMED version || fail "volumed does not run in the VM"

# NVMe/TCP: one write of the option string to /dev/nvme-fabrics, the
# reply read back on the same descriptor.
nvmet_subsys $NQN 1 64
nvmet_port 1 127.0.0.1 4420 $NQN
exec 3<>/dev/nvme-fabrics
echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$NQN" >&3 || fail "nvme connect"
read -r reply <&3
exec 3>&-
ctrl=nvme$(echo "$reply" | sed -n 's/.*instance=\([0-9]*\).*/\1/p')
[ "$ctrl" != nvme ] || fail "nvme connect: no instance in '$reply'"
ns=
find_ns() {
	local b
	for b in /sys/block/nvme*n1; do
		[ "$(cat $b/device/subsysnqn 2>/dev/null)" = "$NQN" ] && ns=${b##*/}
	done
	[ -n "$ns" ] && [ -b /dev/$ns ]
}
wait_until 10 find_ns || fail "no block device for $NQN namespace 1 (controller $ctrl)"
log "nvme: $ctrl, namespace /dev/$ns, $(cat /sys/block/$ns/size) sectors"
check_dev_rw /dev/$ns $MNT/nvme smoke-nvme
echo 1 > /sys/class/nvme/$ctrl/delete_controller
wait_until 10 is 0 nvme_ctrls || fail "controller $ctrl not deleted"

# iSCSI: open-iscsi against LIO.
lio_target $IQN 1 64
lio_portal $IQN 127.0.0.1:3260
iscsiadm -m discovery -t st -p 127.0.0.1 | grep -q "$IQN" || fail "iscsi discovery of $IQN"
iscsiadm -m node -T $IQN -p 127.0.0.1 --login >/dev/null || fail "iscsi login to $IQN"
expect_count "iscsi sessions" "$(iscsi_sessions $IQN)" 1
sd=
find_sd() {
	local b
	for b in /sys/class/iscsi_session/session*/device/target*/*/block/*; do [ -e "$b" ] && sd=${b##*/}; done
	[ -n "$sd" ] && [ -b /dev/$sd ]
}
wait_until 10 find_sd || fail "no disk after the iscsi login"
log "iscsi: /dev/$sd, $(cat /sys/block/$sd/size) sectors"
check_dev_rw /dev/$sd $MNT/iscsi smoke-iscsi
iscsiadm -m node -T $IQN -p 127.0.0.1 --logout >/dev/null || fail "iscsi logout"
wait_until 10 is 0 iscsi_sessions || fail "iscsi session still there after logout"

# volumed, with the driver every build has: a loop volume.
manifest lp1 "loop: {file: $IMG/lp1.img, create: {size: 64Mi}}"
agent_up
ready 60 lp1
check_rw $MNT/lp1 smoke-loop
rm_manifest lp1
wait_until 30 gone lp1 || fail "lp1 still listed 30s after its manifest was removed"
mounted $MNT/lp1 && fail "$MNT/lp1 still mounted after teardown"
expect_count "loop devices on lp1.img" "$(losetup -a | grep -c lp1.img)" 0
agent_stop
