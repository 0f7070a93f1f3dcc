# vmtest: timeout=150 disks
# Bare metal from blank disks: two partition volumes pick the NVMe disk
# by a CEL expression over its facts (its transport and size), and a GPT
# with both partitions (found by label) is written, formatted and
# mounted. The other disks (virtio, SCSI) are byte-for-byte unchanged; a
# disk volume whose expression no disk matches waits and says why per
# disk. A restart writes nothing: the table is byte-identical.

by_serial() {
	local b
	for b in /sys/block/nvme*n*; do [ "$(tr -d ' ' < $b/device/serial 2>/dev/null)" = VOLNVME1 ] && echo /dev/${b##*/}; done
}
has() { [ -n "$("$@")" ]; }
wait_until 20 has by_serial || fail "the VM has no NVMe disk with serial VOLNVME1 (qemu nvme,serial=)"
N=$(by_serial)
log "NVMe disk VOLNVME1 is $N"
others=$(ls /dev/vd? /dev/sd? 2>/dev/null)
sums() { for d in $others; do md5sum $d; done; }
before=$(sums)
# The table: the protective MBR, the primary GPT and the backup at the end.
table() { dd if=$N bs=512 count=34 2>/dev/null | md5sum; dd if=$N bs=512 skip=$(($(blockdev --getsz $N) - 33)) 2>/dev/null | md5sum; }

SEL="disk: {match: 'disk.transport == \"nvme\" && disk.size == 96 * MiB'}"
agent_up
manifest pa "partition: {$SEL, label: pa, size: 32Mi}"
manifest pb "partition: {$SEL, label: pb, grow: true}"
manifest none "disk: {match: 'disk.transport == \"nvme\" && disk.size > 1 * TiB'}"
ready 40 pa pb
for v in pa pb; do
	dev=$(vfield $v device)
	case $dev in ${N}p[12]) ;; *) fail "$v is on '$dev', not a partition of $N" ;; esac
	label=$(blkid -p -s PART_ENTRY_NAME -o value $dev)
	[ "$label" = $v ] || fail "$dev is named '$label', want $v"
	check_rw $MNT/$v partition-$v
done
none_says() { vfield none lastError | grep -q "no disk matches"; }
wait_until 20 none_says || fail "none: $(vfield none lastError)"
vfield none lastError | grep -q "$N: false" || fail "none does not say why $N fails: $(vfield none lastError)"
$VOLUMED disks --socket $SOCK -o json | grep -q '"pa"' || fail "volumed disks does not name pa: $($VOLUMED disks --socket $SOCK)"

t1=$(table)
agent_stop
agent_up
ready 40 pa pb
[ "$(table)" = "$t1" ] || fail "the restart rewrote the partition table of $N"
[ "$(sums)" = "$before" ] || fail "a disk the expression does not select was written: $(sums) / $before"
agent_stop
