# vmtest: timeout=180
# The agent killed by its crash points (SIGKILL) right after the kernel
# attached a volume, and right after it made the intent to detach one
# durable: each restart finishes the job with exactly one controller or
# session, and none is left once the volumes are gone.

NQN=nqn.2024-01.io.example:crash
IQN=iqn.2024-01.io.example:crash
both_targets $NQN $IQN

# crash_at POINT: the agent, stopped before the manifests changed (a
# running agent would act on the change itself, before the crash point is
# armed), starts with the crash point and dies at it.
crash_at() {
	agent_start VOLUMED_CRASH_AT=$1
	agent_crashed 60
	log "crashed at $1"
}

# Attach, NVMe: connected, not yet recorded.
nvme_manifest cn $NQN 1
crash_at attach:after-kernel
expect_count "controllers for $NQN after the crash" "$(nvme_ctrls $NQN)" 1
agent_up
ready 60 cn
expect_count "controllers for $NQN after the restart" "$(nvme_ctrls $NQN)" 1
check_rw $MNT/cn crash-nvme

# Attach, iSCSI: logged in, not yet recorded; the NVMe volume stays put.
agent_stop
iscsi_manifest ci $IQN 0
crash_at attach:after-kernel
expect_count "sessions to $IQN after the crash" "$(iscsi_sessions $IQN)" 1
agent_up
ready 60 cn ci
expect_count "sessions to $IQN after the restart" "$(iscsi_sessions $IQN)" 1
expect_count "controllers for $NQN after the restart" "$(nvme_ctrls $NQN)" 1
check_rw $MNT/ci crash-iscsi
check_has $MNT/cn crash-nvme

# A plain SIGKILL with both Ready: the restart adopts both, doubles nothing.
agent_kill
agent_up
ready 30 cn ci
expect_count "controllers for $NQN after a SIGKILL" "$(nvme_ctrls $NQN)" 1
expect_count "sessions to $IQN after a SIGKILL" "$(iscsi_sessions $IQN)" 1
expect_count "mounts of cn" "$(awk -v p=$MNT/cn '$2 == p' /proc/mounts | wc -l)" 1

# detach_crash NAME COUNT: NAME's manifest goes; the agent dies with the
# detach intent durable, the kernel not yet touched; the restart finishes
# the teardown, after which COUNT (nvme_ctrls, iscsi_sessions) prints 0.
detach_crash() {
	agent_stop
	rm_manifest $1
	crash_at detach:after-intent
	agent_up
	wait_until 60 gone $1 || fail "$1 still listed 60s after the restart: $(vstatus $1)"
	wait_until 30 is 0 $2 || fail "$2 after $1 went: $($2), want 0"
}

# NVMe first, while the iSCSI volume stays; then iSCSI.
detach_crash cn nvme_ctrls
ready 10 ci
expect_count "sessions to $IQN with ci left" "$(iscsi_sessions $IQN)" 1
detach_crash ci iscsi_sessions
expect_count "mounts under $VT_DIR" "$(mounts_under $VT_DIR)" 0
agent_stop
