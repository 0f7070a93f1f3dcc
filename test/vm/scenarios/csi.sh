# vmtest: timeout=150
# The CSI node service against real iSCSI (with CHAP, the secret coming
# through the CSI secrets map) and NVMe/TCP (a raw block volume): stage,
# publish, kill and restart the agent (nothing remounted, nothing logged
# out), unpublish, unstage (the session and controller go). The secret is
# in neither the agent's log nor its status.

IQN=iqn.2024-01.io.example:csi
NQN=nqn.2024-01.io.example:csi
CHAP_USER=vmtest-csi
SECRET=Vt-csi-5ecret-7731
lio_target $IQN 1 64 $CHAP_USER $SECRET
lio_portal $IQN 127.0.0.1:3260
nvmet_subsys $NQN 1 64
nvmet_port 1 127.0.0.1 4420 $NQN

S=$VT_DIR/secrets
mkdir -p $S && chmod 0700 $S
echo -n "$SECRET" > $S/chap && chmod 0600 $S/chap

EP=unix://$VT_DIR/csi.sock
AGENT_ARGS="--csi-endpoint $EP --node-id vm-node"
K=$VT_DIR/kubelet
mkdir -p $K/iscsi-stage $K/nvme-stage
csi() { vmcsi $EP "$@"; }
csi_ready() { csi probe 2>/dev/null; }

agent_up
wait_until 30 csi_ready || fail "CSI Probe not ready within 30s"

csi stage pv-iscsi $K/iscsi-stage mount ext4 iscsi.portal=127.0.0.1:3260 iscsi.iqn=$IQN iscsi.lun=0 \
	iscsi.chap.username=$CHAP_USER secret:iscsi.chap.password=@$S/chap || fail "stage the iSCSI volume: $(tail -n 3 $ALOG)"
csi publish pv-iscsi $K/iscsi-stage $K/pod/data mount ext4 || fail "publish the iSCSI volume"
check_rw $K/pod/data csi-iscsi
expect_count "sessions to $IQN" "$(iscsi_sessions $IQN)" 1

csi stage pv-nvme $K/nvme-stage block nvme.transport=tcp nvme.address=127.0.0.1 nvme.port=4420 nvme.nqn=$NQN nvme.namespace=1 ||
	fail "stage the NVMe volume: $(tail -n 3 $ALOG)"
csi publish pv-nvme $K/nvme-stage $K/pod/raw block || fail "publish the NVMe volume raw"
[ -b $K/pod/raw ] || fail "$K/pod/raw is not a block device"
echo csi-raw-block | dd of=$K/pod/raw bs=4096 seek=1 conv=fsync 2>/dev/null || fail "write through the raw target"
echo 3 > /proc/sys/vm/drop_caches
[ "$(dd if=$(nvmet_loop $NQN 1) bs=4096 skip=1 count=1 2>/dev/null | head -c 13)" = csi-raw-block ] ||
	fail "the target's backing device does not hold what was written through the raw target"
expect_count "controllers for $NQN" "$(nvme_ctrls $NQN)" 1

before=$(grep " $K/" /proc/self/mountinfo | cut -d' ' -f1 | sort | tr '\n' ' ')
agent_kill
agent_up
wait_until 30 csi_ready || fail "CSI Probe not ready within 30s after the restart"
ready 60 csi-pv-iscsi
after=$(grep " $K/" /proc/self/mountinfo | cut -d' ' -f1 | sort | tr '\n' ' ')
[ "$before" = "$after" ] || fail "mounts changed across the restart: [$before] -> [$after]"
check_has $K/pod/data csi-iscsi
expect_count "sessions to $IQN after the restart" "$(iscsi_sessions $IQN)" 1

csi unpublish pv-iscsi $K/pod/data || fail "unpublish the iSCSI volume"
csi unstage pv-iscsi $K/iscsi-stage || fail "unstage the iSCSI volume"
csi unpublish pv-nvme $K/pod/raw || fail "unpublish the NVMe volume"
csi unstage pv-nvme $K/nvme-stage || fail "unstage the NVMe volume"
[ ! -e $K/pod/data ] && [ ! -e $K/pod/raw ] || fail "targets left behind after unpublish"
wait_until 30 is 0 iscsi_sessions || fail "iSCSI sessions left: $(iscsi_sessions)"
wait_until 30 is 0 nvme_ctrls || fail "NVMe controllers left: $(nvme_ctrls)"
grep -qF "$SECRET" $ALOG && fail "the CHAP secret is in the agent's log"
vstatus 2>&1 | grep -qF "$SECRET" && fail "the CHAP secret is in the status"
agent_stop
