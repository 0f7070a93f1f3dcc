# vmtest: timeout=120
# Two volumes on two namespaces of one NVMe/TCP subsystem share one
# controller; removing one manifest tears down only that volume, removing
# the last deletes the controller. Data survives a teardown and re-attach
# (nothing is formatted twice).

NQN=nqn.2024-01.io.example:nvme-two
nvmet_subsys $NQN 2 64
nvmet_port 1 127.0.0.1 4420 $NQN

manifest_a() { nvme_manifest nv1 $NQN 1; }
manifest_b() { nvme_manifest nv2 $NQN 2; }
attachments() { nvme_ctrls $NQN; }
agent_up
shares_one nv1 nv2 "controllers for $NQN"
agent_stop
