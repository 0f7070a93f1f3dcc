#!/bin/sh
# ostest-targets.service: an iSCSI target (LIO) and an NVMe/TCP subsystem
# (nvmet) inside the guest, at 10.99.0.1 on dummy0, which ifupdown brings
# up at boot and takes down at shutdown: "the network". Each exports one
# 64 MiB disk. Nothing is torn down when the unit stops: the targets go
# when their address does, like a storage box out of reach. They are
# backed by two virtio disks (serials TGTISC and TGTNVM), not by files on
# the root filesystem, which the kernel would hold open for writing and
# keep from being remounted read-only at shutdown.
set -eu
IQN=iqn.2026-11.io.ostest:lun
NQN=nqn.2026-11.io.ostest:ns
ADDR=10.99.0.1
LUN=/dev/disk/by-id/virtio-TGTISC
NS=/dev/disk/by-id/virtio-TGTNVM
i=0
while [ ! -e $LUN ] || [ ! -e $NS ]; do
	[ $i -lt 300 ] || { echo "no $LUN or $NS" >&2; exit 1; }
	sleep 0.1
	i=$((i + 1))
done
modprobe -a nvmet nvmet-tcp target_core_mod target_core_iblock iscsi_target_mod

N=/sys/kernel/config/nvmet
mkdir $N/subsystems/$NQN
echo 1 >$N/subsystems/$NQN/attr_allow_any_host
mkdir $N/subsystems/$NQN/namespaces/1
echo -n $(readlink -f $NS) >$N/subsystems/$NQN/namespaces/1/device_path
echo 1 >$N/subsystems/$NQN/namespaces/1/enable
mkdir $N/ports/1
echo tcp >$N/ports/1/addr_trtype
echo ipv4 >$N/ports/1/addr_adrfam
echo $ADDR >$N/ports/1/addr_traddr
echo 4420 >$N/ports/1/addr_trsvcid
ln -s $N/subsystems/$NQN $N/ports/1/subsystems/$NQN

L=/sys/kernel/config/target
mkdir -p $L/core/iblock_0/lun0
echo "udev_path=$(readlink -f $LUN)" >$L/core/iblock_0/lun0/control
echo -n $(readlink -f $LUN) >$L/core/iblock_0/lun0/udev_path
echo 1 >$L/core/iblock_0/lun0/enable
T=$L/iscsi/$IQN/tpgt_1
mkdir -p $T/lun/lun_0
ln -s $L/core/iblock_0/lun0 $T/lun/lun_0/port
echo 1 >$T/attrib/generate_node_acls
echo 1 >$T/attrib/cache_dynamic_acls
echo 0 >$T/attrib/demo_mode_write_protect
echo 0 >$T/attrib/authentication
mkdir $T/np/$ADDR:3260
echo 1 >$T/enable
