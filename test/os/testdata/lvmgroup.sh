# The lvmgroup probe (issue 24, the VG slice), two boots of one machine.
# Before volumed, at the first boot, lvmgroup-prep.sh made the foreign VG
# vgforeign on VGFOREIGN (with the LV fl) and, on VGB, the orphan PV a
# crash of volumed between its pvcreate and its vgcreate would leave.
#
#   data:  lvm in vgsel, which volumed makes from the disks whose serial
#          starts with VG: the blank VGA, its own orphan PV on VGB; never
#          VGDATA (bytes, no signature) or VGFOREIGN (a foreign PV).
#          After the reboot (with the blank VGC attached, grow: true)
#          VGC joins the VG, the LV is activated by volumed, same data;
#          then the SCSI disk VGD, hot-added, joins it when the manifest
#          asks for a size only it makes room for (the LV and its
#          filesystem grown online).
#   adopt: names vgforeign with createVolumeGroup: adopted read-only.
phase=1
[ -e /var/lib/ostest/lvmgroup-phase2 ] && phase=2
b=boot$phase
# dev_of SERIAL: the virtio disk of that serial, read by the shell (a
# cat per disk cost ~0.2 s of emulated CPU each, at every look-up).
dev_of() {
	for d in /sys/block/vd*; do
		ser=
		read -r ser 2>/dev/null <"$d/serial"
		[ "$ser" = "$1" ] && echo "/dev/${d##*/}"
	done
}
lvfield() { lvs --noheadings --units b --nosuffix -o "$2" "$1" 2>&1 | tr -d ' '; }
# fsbytes PATH: the size of the filesystem mounted there in bytes (df's
# size: its blocks times their size), from one stat (df, tail and tr were
# three processes, at every poll).
fsbytes() {
	# shellcheck disable=SC2046 # two numbers, two words
	set -- $(stat -f -c '%b %S' "$1" 2>/dev/null)
	[ -n "$2" ] && echo $(($1 * $2))
}
# pvcount: vgsel's PV count, the spaces lvm2 pads it with split off by the
# shell.
pvcount() {
	# shellcheck disable=SC2046
	set -- $(vgs --noheadings -o pv_count vgsel 2>/dev/null)
	echo "$1"
}

phase "$b: start"
if ! volumed wait data --timeout 4m >/dev/null 2>&1; then
	fail "volume data not Ready: $(volumed status -o json data | tr '\n' ' ')"
	log_cmd volumed disks
	log_cmd journalctl -u volumed --no-pager -n 80
	log_cmd pvs -o pv_name,vg_name,pv_uuid
	done_step $b
	systemctl poweroff
	exit 0
fi
phase "$b: data Ready"
kv $b.data.phase "$(vfield data phase)"
kv $b.data.note "$(vfield data lastError)"
kv $b.data.fstype "$(findmnt -no FSTYPE /srv/data)"
kv $b.data.fsuuid "$(findmnt -no UUID /srv/data)"
# One report for several values (each lvm2 run costs ~0.4 s of emulated
# CPU).
row=$(lvs --noheadings --units b --nosuffix --separator '|' -o lv_uuid,lv_size,lv_tags vgsel/data 2>&1 | tr -d ' ')
IFS='|' read -r lvuuid size tags <<EOF
$row
EOF
kv $b.data.lvuuid "$lvuuid"
kv $b.data.size "$size"
kv $b.data.tags "$tags"
kv $b.data.devices "$(lvs --noheadings -o devices vgsel/data | tr -d ' ' | tr ',' '\n' | grep -c .)"
row=$(vgs --noheadings --units b --nosuffix --separator '|' -o vg_tags,vg_extent_size,pv_count vgsel | tr -d ' ')
IFS='|' read -r tags extent pvcount <<EOF
$row
EOF
kv $b.vg.tags "$tags"
kv $b.vg.extent "$extent"
kv $b.vg.pvcount "$pvcount"
# Every PV in one report (a report per disk cost an lvm2 run each); a
# disk that is none has an empty value.
pvtab=$(pvs --noheadings --units b --nosuffix --separator : -o pv_name,vg_name,pv_uuid,pe_start 2>/dev/null | tr -d ' ')
for s in VGA VGB VGC VGDATA VGFOREIGN; do
	d=$(dev_of $s)
	[ -n "$d" ] || continue
	row=
	for l in $pvtab; do
		case $l in "$d":*) row=${l#"$d":} ;; esac
	done
	kv $b.pv.$s "$row"
done
log_cmd pvs -o pv_name,vg_name,pv_uuid,pe_start,pv_tags
log_cmd vgs -o vg_name,vg_tags,pv_count,vg_extent_size,vg_autoactivation
log_cmd volumed status
phase "$b: reports read"
check "volume thin Ready" volumed wait thin --timeout 3m
kv $b.thin.phase "$(vfield thin phase)"
kv $b.thin.lv "$(lvs --noheadings --separator : -o lv_name,segtype,pool_lv,lv_tags vgsel/thin | tr -d ' ')"
row=$(lvs --noheadings --units b --nosuffix --separator '|' -o lv_name,segtype,lv_tags,lv_size,lv_metadata_size vgsel/pool0 | tr -d ' ')
IFS='|' read -r pname ptype ptags psize meta <<EOF
$row
EOF
kv $b.pool "$pname:$ptype:$ptags:$psize"
kv $b.pool.meta "$meta"
if [ "$phase" = 1 ]; then
	check "volume adopt Ready" volumed wait adopt --timeout 3m
	kv boot1.adopt.phase "$(vfield adopt phase)"
	kv boot1.adopt.note "$(vfield adopt lastError)"
	kv boot1.adopt.fsuuid "$(findmnt -no UUID /srv/adopt)"
	kv boot1.foreign.tags "$(vgs --noheadings -o vg_tags vgforeign | tr -d ' ')"
	kv boot1.foreign.lvs "$(lvs --noheadings -o lv_name vgforeign | tr -d ' ' | sort | tr '\n' ',')"
	head -c 1M /dev/urandom >/srv/data/payload
	sync /srv/data/payload
	kv boot1.sum "$(sha256sum </srv/data/payload | cut -d' ' -f1)"
	phase "boot1: done"
	mkdir -p /var/lib/ostest
	touch /var/lib/ostest/lvmgroup-phase2
	sync /var/lib/ostest
	done_step boot1
	systemctl reboot
	exit 0
fi
kv boot2.sum "$(sha256sum </srv/data/payload | cut -d' ' -f1)"
# The host hot-adds the blank SCSI disk VGD; the manifest then asks for
# more than the VG holds (744 MiB over VGA, VGB, VGC): volumed's grow adds
# VGD to the VG, extends the LV and grows its filesystem, mounted.
FSBEFORE=$(fsbytes /srv/data)
kv grow.fsbefore "$FSBEFORE"
done_step boot2
hot() { lsblk -dno SERIAL | grep -qx VGD; }
wait_until 180 hot || fail "the hot-added disk VGD never appeared: $(lsblk -dno NAME,SERIAL | tr '\n' ' ')"
vgd=/dev/$(lsblk -dno NAME,SERIAL | awk '$2 == "VGD" { print $1 }')
kv grow.disk "$vgd"
phase "VGD there"
# The disk's uevent alone, the manifest unchanged and the volume Ready:
# volumed takes it into the VG (grow: true) under a grow operation.
joined() { [ "$(pvcount)" = 4 ] && [ "$(vfield data phase)" = Ready ]; }
wait_until 240 joined || fail "the hot-added disk VGD never joined vgsel: $(vgs vgsel 2>&1 | tr '\n' ' ') $(volumed status -o json data | tr '\n' ' ')"
phase "VGD joined"
kv joined.pvcount "$(pvcount)"
kv joined.lvsize "$(lvfield vgsel/data lv_size)"
kv joined.phase "$(vfield data phase)"
log_cmd journalctl -u volumed --no-pager -g 'block device added|grow' -n 20
sed -i 's/size: 300Mi/size: 800Mi/' /etc/volumed/volumes.d/data.yaml
# The filesystem's size first: cheaper than an lvs (each poll costs).
grown() { [ "$(fsbytes /srv/data)" -gt "$FSBEFORE" ] && [ "$(lvfield vgsel/data lv_size)" = 838860800 ]; }
wait_until 300 grown || fail "volume data not grown to 800Mi: $(lvs vgsel 2>&1 | tr '\n' ' ') $(volumed status -o json data | tr '\n' ' ')"
phase "data grown"
kv grow.lvsize "$(lvfield vgsel/data lv_size)"
kv grow.fsafter "$(fsbytes /srv/data)"
kv grow.pvcount "$(pvcount)"
kv grow.pv "$(pvs --noheadings --separator : -o vg_name,pv_uuid "$vgd" 2>/dev/null | tr -d ' ')"
kv grow.sum "$(sha256sum </srv/data/payload | cut -d' ' -f1)"
# The growth's operation may still be ending: wait for the volume (a
# long poll) before its phase is read (a run at host load 20 read "").
volumed wait data --timeout 2m >/dev/null 2>&1
kv grow.phase "$(vfield data phase)"
log_cmd pvs -o pv_name,vg_name,pv_uuid
log_cmd volumed status data
done_step grown
# The crash points of the LVM operations, on spare disks (TestLVMGroup's
# second boot seeds the script and a crashpoints build of volumed).
. /usr/lib/ostest/lvmcrash.sh
# For the closing note of issue 24: the status and the LVM gauges, after
# the chain, which started the image's volumed again: its start-up
# health check sets the gauges (before the chain they came only at the
# first resync, a minute after the boot's start, waited for in polls).
metrics() { bash -c 'exec 3<>/dev/tcp/127.0.0.1/9760 && printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' 2>/dev/null; }
pool_gauge() { metrics | grep -q '^volumed_lvm_thinpool_data_percent'; }
wait_every 6 150 pool_gauge || say "OSTEST-LOG no thin pool gauge yet"
phase "pool gauge there"
log_cmd volumed status
metrics | grep '^volumed_lvm_' | while IFS= read -r l; do say "OSTEST-LOG $l"; done
done_step gauges
systemctl poweroff
