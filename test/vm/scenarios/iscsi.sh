# vmtest: timeout=120
# Two volumes on two LUNs of one iSCSI target share one session; removing
# one manifest tears down only that volume, removing the last logs out.
# Data survives a teardown and re-attach (nothing is formatted twice).

IQN=iqn.2024-01.io.example:iscsi-two
lio_target $IQN 2 64
lio_portal $IQN 127.0.0.1:3260

manifest_a() { iscsi_manifest is1 $IQN 0; }
manifest_b() { iscsi_manifest is2 $IQN 1; }
attachments() { iscsi_sessions $IQN; }
agent_up
shares_one is1 is2 "sessions to $IQN"
agent_stop
