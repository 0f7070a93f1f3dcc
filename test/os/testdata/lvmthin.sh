# The lvmthin probe (issue 24, second slice), one boot. vgthin.sh (before
# volumed) made the VG vgthin and its thin pool pool (128 MiB).
#
#   thin:  a thin LV volumed creates in the pool (256 MiB virtual).
#   grow:  a linear LV grown online by raising its manifest's size; a
#          smaller size refused; an lvextend whose filesystem grow did
#          not happen (volumed stopped) finished at the next start.
#   metrics, full: the pool's gauges, and the pool filled past 90%.
#   cut:   the LV extended again by hand, volumed stopped, then the power
#          cut (the host kills qemu): after the reboot the filesystem is
#          grown.
FIELDS=lv_name,lv_uuid,lv_tags,lv_size,lv_active,lv_device_open,lv_kernel_major,lv_kernel_minor,segtype,vg_name,pool_lv,data_percent,metadata_percent
VGFIELDS=vg_name,vg_uuid,vg_size,vg_free,vg_extent_size,vg_missing_pv_count
lvfield() { lvs --noheadings --units b --nosuffix -o "$2" "vgthin/$1" 2>&1 | tr -d ' '; }
# fssize PATH: the size of the filesystem mounted there in bytes (df's
# size: its blocks times their size), from one stat.
fssize() {
	# shellcheck disable=SC2046 # two numbers, two words
	set -- $(stat -f -c '%b %S' "$1" 2>/dev/null)
	[ -n "$2" ] && echo $(($1 * $2))
}
mountid() { awk -v p="$1" '$5 == p { print $1 }' /proc/self/mountinfo | tail -n 1; }
# status_has NAME TEXT: the volume's status holds TEXT; one process a
# poll, the match made by the shell.
status_has() {
	case $(volumed status -o json "$1" 2>/dev/null) in *"$2"*) return 0 ;; esac
	return 1
}
metrics() { bash -c 'exec 3<>/dev/tcp/127.0.0.1/9760 && printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' 2>/dev/null; }
metric_has() { metrics | grep -q "^$1"; }
setsize() { sed -i "s/size: [0-9]*Mi/size: $1/" /etc/volumed/volumes.d/grow.yaml; }

if [ -e /var/lib/ostest/thin-phase2 ]; then
	phase "boot2: start"
	check "volume grow Ready after the power cut" volumed wait grow --timeout 5m
	read -r cutfs </var/lib/ostest/thin-phase2
	cutgrown() { [ "$(fssize /srv/grow)" -gt "$cutfs" ]; }
	# The growth check of volumed's start comes before the mount: the
	# filesystem is grown at the resync's (once a minute): a poll every 6 s.
	wait_every 6 180 cutgrown || fail "the filesystem of grow not grown after the power cut: $(fssize /srv/grow)"
	phase "boot2: grown after the power cut"
	kv cut.fssize "$(fssize /srv/grow)"
	kv cut.lvsize "$(lvfield grow lv_size)"
	log_cmd volumed status grow
	done_step thin2
	exit 0
fi
phase start
check "volume thin Ready" volumed wait thin --timeout 5m
check "volume grow Ready" volumed wait grow --timeout 3m
phase "thin, grow Ready"
kv thin.phase "$(vfield thin phase)"
# One report for the four (each lvm2 run costs ~0.4 s of emulated CPU).
row=$(lvs --noheadings --units b --nosuffix --separator '|' -o segtype,pool_lv,lv_tags,lv_size vgthin/thin 2>&1 | tr -d ' ')
IFS='|' read -r segtype pool tags size <<EOF
$row
EOF
kv thin.segtype "$segtype"
kv thin.pool "$pool"
kv thin.tags "$tags"
kv thin.size "$size"
kv thin.fstype "$(findmnt -no FSTYPE /srv/thin)"
log_cmd volumed status thin

# grow: 32 MiB to 64 MiB, online.
head -c 1M /dev/urandom >/srv/grow/payload
sync /srv/grow/payload
kv grow.before.sum "$(sha256sum </srv/grow/payload | cut -d' ' -f1)"
kv grow.before.mountid "$(mountid /srv/grow)"
kv grow.before.lvsize "$(lvfield grow lv_size)"
before=$(fssize /srv/grow)
setsize 64Mi
# The filesystem's size first: one process, where the LV's is two.
grown() { [ "$(fssize /srv/grow)" -gt "$before" ] && [ "$(lvfield grow lv_size)" = 67108864 ]; }
wait_until 180 grown || fail "volume grow not grown: LV $(lvfield grow lv_size), fs $(fssize /srv/grow) (was $before): $(volumed status -o json grow)"
phase "grown"
kv grow.lvsize "$(lvfield grow lv_size)"
grown && kv grow.fsgrew yes
kv grow.phase "$(vfield grow phase)"
kv grow.sum "$(sha256sum </srv/grow/payload | cut -d' ' -f1)"
kv grow.mountid "$(mountid /srv/grow)"
log "grow: filesystem $before -> $(fssize /srv/grow) bytes"

# shrink: 32 MiB asked of a 64 MiB LV: refused, nothing changed.
setsize 32Mi
wait_until 180 status_has grow ShrinkRefused || fail "no ShrinkRefused on volume grow: $(volumed status -o json grow)"
phase "shrink refused"
kv shrink.reason "$(status_has grow ShrinkRefused && echo ShrinkRefused)"
status_has grow '33554432 bytes, its source has 67108864' && kv shrink.names yes
kv shrink.lvsize "$(lvfield grow lv_size)"
log_cmd volumed status grow
setsize 64Mi
wait_until 180 status_has grow '"phase": "Ready"' || fail "volume grow not Ready again at 64Mi: $(volumed status -o json grow)"

# A run that extended the LV and stopped before the filesystem grow.
phase "Ready at 64Mi"
check "stop volumed" systemctl stop volumed
before=$(fssize /srv/grow)
check "lvextend by hand" lvextend -q -L 96M vgthin/grow
setsize 96Mi
check "start volumed" systemctl start volumed
check "volume grow Ready after the restart" volumed wait grow --timeout 3m
crashgrown() { [ "$(fssize /srv/grow)" -gt "$before" ]; }
# At the resync's growth check, as after the power cut below.
wait_every 6 180 crashgrown || fail "the filesystem of grow not grown after the restart: $(fssize /srv/grow) (was $before)"
phase "grow finished after the restart"
crashgrown && kv crash.fsgrew yes
kv crash.lvsize "$(lvfield grow lv_size)"
kv crash.phase "$(vfield grow phase)"
kv crash.mountid "$(mountid /srv/grow)"

# metrics: gauges appear at the resync's health check after the volumes
# are attached.
wait_until 180 metric_has 'volumed_lvm_thinpool_data_percent{thin_pool="pool",volume_group="vgthin"}' || fail "no thin pool gauge: $(metrics | grep volumed_lvm)"
phase "pool gauge"
metric_has 'volumed_lvm_volumegroup_size_bytes{volume_group="vgthin"} 5' && kv metrics.vgsize yes
metric_has 'volumed_lvm_thinpool_data_percent{thin_pool="pool",volume_group="vgthin"}' && kv metrics.pooldata yes
metric_has 'volumed_lvm_thinpool_metadata_percent{thin_pool="pool",volume_group="vgthin"}' && kv metrics.poolmeta yes
metrics | grep '^volumed_lvm' | while IFS= read -r l; do log "$l"; done
log "the reports, for drivers/lvm/testdata (lvm2 2.03.16):"
log_cmd lvs --reportformat json --units b --nosuffix --binary -o $FIELDS vgthin
log_cmd vgs --reportformat json --units b --nosuffix -o $VGFIELDS

# csi: the lvm backend of the CSI controller, before the pool is filled.
. /usr/lib/ostest/lvmcsi.sh

# full: fill the pool to about 95% through the thin LV.
used=$(lvs --noheadings -o data_percent vgthin/pool | tr -d ' ')
size=$(lvs --noheadings --units m --nosuffix -o lv_size vgthin/pool | tr -d ' ')
mib=$(awk -v u="$used" -v s="$size" 'BEGIN { n = int(s * (95 - u) / 100); print (n > 0 ? n : 1) }')
phase "pool at $used% of $size MiB: writing $mib MiB"
# Zeros: dm-thin provisions a block for any write (it does not look for
# zeros), and /dev/urandom cost seconds of emulated CPU per 10 MiB.
dd if=/dev/zero of=/srv/thin/fill bs=1M count="$mib" conv=fsync 2>/dev/null || fail "dd into the thin volume failed"
kv full.datapct "$(lvs --noheadings -o data_percent vgthin/pool | tr -d ' ')"
# At the resync's health check (once a minute): a poll every 6 s.
wait_every 6 180 status_has thin ThinPoolFull || fail "no ThinPoolFull on volume thin: $(volumed status -o json thin)"
phase "ThinPoolFull"
status_has thin ThinPoolFull && kv full.reason ThinPoolFull
kv full.phase "$(vfield thin phase)"
fullmetric() { metrics | grep '^volumed_lvm_thinpool_data_percent' | awk '{ exit !($2 >= 90) }'; }
wait_until 120 fullmetric && kv full.metric yes
phase "full gauge"
log_cmd volumed status thin
log_cmd lvs --reportformat json --units b --nosuffix --binary -o $FIELDS vgthin

# cut: the LV extended to 128 MiB and the manifest raised while volumed
# is stopped; the host then cuts the power.
check "stop volumed" systemctl stop volumed
check "lvextend by hand" lvextend -q -L 128M vgthin/grow
setsize 128Mi
kv cut.fssize "$(fssize /srv/grow)"
mkdir -p /var/lib/ostest
fssize /srv/grow >/var/lib/ostest/thin-phase2
sync
done_step thin
sleep infinity
