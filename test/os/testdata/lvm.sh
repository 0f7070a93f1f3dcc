# The lvm probe (issue 24, first slice), two boots of one machine. vg.sh
# (before volumed starts) made the VG vgtest on the disk LVMPV and, in it,
# the LV shared (ext4, UUID $SHARED_UUID) that volumed did not create.
# lvmlocal.conf keeps the host's LVM from activating any LV at boot, so
# after the reboot only volumed activates its own.
#
#   data: an LV volumed creates (tagged volumed:data), formats and mounts;
#         after the reboot it is activated by volumed, same filesystem.
#   half: its LV (tagged volumed:half, inactive) was left by a "crash"
#         between lvcreate and its record: found by the tag, activated.
#   ext:  names the foreign LV shared: used as it is, never tagged or
#         formatted; inactive after the reboot, it waits (volumed never
#         activates an LV it did not create) until the operator does.
#   teardown: the data manifest removed, the LV is deactivated, kept.
FIELDS=lv_name,lv_uuid,lv_tags,lv_size,lv_active,lv_device_open,lv_kernel_major,lv_kernel_minor,segtype,vg_name
phase=1
[ -e /var/lib/ostest/lvm-phase2 ] && phase=2
b=boot$phase
lvfield() { lvs --noheadings --units b --nosuffix -o "$2" "vgtest/$1" 2>&1 | tr -d ' '; }
samedev() { [ "$(readlink -f "$(findmnt -no SOURCE "$1")")" = "$(readlink -f "$2")" ] && echo yes || echo no; }

phase "$b: start"
check "volume data Ready" volumed wait data --timeout 5m
phase "$b: data Ready"
kv $b.data.phase "$(vfield data phase)"
kv $b.data.fstype "$(findmnt -no FSTYPE /srv/data)"
kv $b.data.fsuuid "$(findmnt -no UUID /srv/data)"
kv $b.data.samedev "$(samedev /srv/data /dev/mapper/vgtest-data)"
# One report for the four (each lvm2 run costs ~0.4 s of emulated CPU).
row=$(lvs --noheadings --units b --nosuffix --separator '|' -o lv_tags,lv_uuid,segtype,lv_size vgtest/data 2>&1 | tr -d ' ')
IFS='|' read -r tags lvuuid segtype size <<EOF
$row
EOF
kv $b.data.tags "$tags"
kv $b.data.lvuuid "$lvuuid"
kv $b.data.segtype "$segtype"
kv $b.data.size "$size"
kv $b.lvs "$(lvs --noheadings -o lv_name vgtest | tr -d ' ' | sort | tr '\n' ',')"
log_cmd volumed status
if [ "$phase" = 1 ]; then
	log "the report of the LV volumed made, for drivers/lvm/testdata/lvs-active.json:"
	log_cmd lvs --reportformat json --units b --nosuffix --binary -o $FIELDS vgtest/data
	check "volume half Ready" volumed wait half --timeout 3m
	kv boot1.half.phase "$(vfield half phase)"
	kv boot1.half.lvuuid "$(lvfield half lv_uuid)"
	check "volume ext Ready" volumed wait ext --timeout 3m
	kv boot1.ext.phase "$(vfield ext phase)"
	kv boot1.ext.fsuuid "$(findmnt -no UUID /srv/ext)"
	kv boot1.ext.samedev "$(samedev /srv/ext /dev/mapper/vgtest-shared)"
	kv boot1.ext.tags "$(lvfield shared lv_tags)"
	phase "boot1: half and ext Ready"
	head -c 1M /dev/urandom >/srv/data/payload
	sync /srv/data/payload
	kv boot1.sum "$(sha256sum </srv/data/payload | cut -d' ' -f1)"
	mkdir -p /var/lib/ostest
	touch /var/lib/ostest/lvm-phase2
	sync /var/lib/ostest
	done_step boot1
	systemctl reboot
	exit 0
fi
kv boot2.sum "$(sha256sum </srv/data/payload | cut -d' ' -f1)"
# ext: the foreign LV is inactive; volumed waits, changing nothing.
has_error() { [ -n "$(vfield ext lastError)" ]; }
wait_until 120 has_error || fail "volume ext has no error: $(volumed status -o json ext)"
phase "boot2: ext says why it waits"
kv boot2.ext.phase "$(vfield ext phase)"
kv boot2.ext.error "$(vfield ext lastError)"
row=$(lvs --noheadings --separator '|' -o lv_active,lv_tags vgtest/shared 2>&1 | tr -d ' ')
IFS='|' read -r active tags <<EOF
$row
EOF
kv boot2.ext.active "$active"
kv boot2.ext.tags "$tags"
check "lvchange -ay vgtest/shared" lvchange -ay vgtest/shared
check "volume ext Ready once its LV is active" volumed wait ext --timeout 4m
phase "boot2: ext Ready"
kv boot2.ext.after "$(vfield ext phase)"
kv boot2.ext.fsuuid "$(findmnt -no UUID /srv/ext)"
# teardown: the manifest goes, the LV is deactivated and kept.
mkdir -p /root/held
mv /etc/volumed/volumes.d/data.yaml /root/held/
# The mount read by the shell, the status matched by it: one process a
# poll.
gone() {
	mounted /srv/data && return 1
	case $(volumed status -o json) in *'"name": "data"'*) return 1 ;; esac
}
wait_until 180 gone || fail "volume data not torn down: $(volumed status)"
phase "boot2: data torn down"
kv teardown.lv "$(lvs --noheadings --separator : -o lv_name,lv_active,lv_tags vgtest/data 2>&1 | tr -d ' ')"
log_cmd volumed status
done_step boot2
systemctl poweroff
