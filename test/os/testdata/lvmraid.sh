# The lvmraid probe (issue 24: raid1, striped, encryption on lvm), two
# boots. vgraid.sh (before volumed) made the VG vgraid on the disks RAIDA
# and RAIDB, and the VG vgenc on LVMENC.
#
#   mirror: a raid1 LV (two legs) volumed creates, ext4, with data (first
#           ActivationFailed KernelTargetMissing until root loads dm-raid:
#           volumed's service may not load modules); after
#           the reboot the host pulls RAIDB (qemu device_del): the data
#           stays readable, the volume gets SourceDegraded
#           (PhysicalVolumeMissing), the metrics show the missing PV.
#   stripe: a striped LV over both PVs; its manifest removed before the
#           pull (deactivated), put back after it: lvm2 will not activate
#           a striped LV with a PV gone, and the volume says so
#           (ActivationFailed, PhysicalVolumeMissing).
#   three:  raid1 with three legs in a VG of two PVs: waits, saying so,
#           nothing created (its manifest put in once the others are
#           Ready, taken out before the reboot).
#   secret: an encrypted lvm volume (LUKS2 with a key file), formatted,
#           mounted, the same after the reboot.
lvfield() { lvs --noheadings --units b --nosuffix -o "$2" "$1" 2>&1 | tr -d ' '; }
# status_has NAME TEXT: the volume's status holds TEXT; one process a
# poll, the match made by the shell.
status_has() {
	case $(volumed status -o json "$1" 2>/dev/null) in *"$2"*) return 0 ;; esac
	return 1
}
# cond_reason NAME TYPE: the reason of the volume's condition TYPE (a
# condition's "reason" line follows its "type" line); two processes a
# poll.
cond_reason() {
	volumed status -o json "$1" 2>/dev/null | awk -v t="\"$2\"," '
		$1 == "\"type\":" { ty = $2 }
		$1 == "\"reason\":" && ty == t { r = $2; gsub(/[",]/, "", r); print r; exit }'
}
metrics() { bash -c 'exec 3<>/dev/tcp/127.0.0.1/9760 && printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' 2>/dev/null; }
sum() { sha256sum <"$1" | cut -d' ' -f1; }
serial_there() { grep -qx "$1" /sys/block/vd*/serial 2>/dev/null; }
VGFIELDS=vg_name,vg_uuid,vg_size,vg_free,vg_extent_size,vg_missing_pv_count,pv_count
FIELDS=lv_name,lv_uuid,lv_tags,lv_size,lv_active,lv_device_open,lv_kernel_major,lv_kernel_minor,segtype,vg_name,pool_lv,data_percent,metadata_percent

phase start
if [ ! -e /var/lib/ostest/raid-phase2 ]; then
	# dm-raid is not loaded, and volumed's service may not load modules:
	# lvcreate fails, and the volume says so; loaded by root (as an
	# operator does, and lists it in modules-load.d), the attach goes on.
	nottarget() { [ "$(cond_reason mirror ActivationFailed)" = KernelTargetMissing ]; }
	wait_until 240 nottarget || fail "no ActivationFailed KernelTargetMissing on volume mirror without dm-raid: $(volumed status -o json mirror)"
	kv notarget.reason "$(cond_reason mirror ActivationFailed)"
	kv notarget.phase "$(vfield mirror phase)"
	status_has mirror 'modules-load.d' && kv notarget.hint yes
	phase "KernelTargetMissing seen"
	check "modprobe dm-raid" modprobe dm-raid
	echo dm-raid >/etc/modules-load.d/ostest-raid.conf
	if ! volumed wait mirror stripe secret --timeout 200s >/dev/null 2>&1; then
		fail "volumes mirror, stripe and secret not Ready"
		log_cmd volumed status -o json mirror
		log_cmd lvs -a -o lv_name,segtype,lv_active,devices,sync_percent vgraid
		log_cmd sh -c 'journalctl -u volumed --no-pager | tail -n 60'
		log_cmd sh -c 'dmesg | tail -n 40'
	fi
	phase "mirror, stripe, secret Ready"
	# One report for the three (each lvm2 run costs ~0.4 s of emulated CPU).
	row=$(lvs --noheadings --separator '|' -o segtype,lv_tags,devices vgraid/mirror 2>&1 | tr -d ' ')
	IFS='|' read -r segtype tags devices <<EOF
$row
EOF
	kv mirror.segtype "$segtype"
	kv mirror.tags "$tags"
	kv mirror.legs "$(echo "$devices" | tr ',' '\n' | grep -c rimage)"
	kv mirror.phase "$(vfield mirror phase)"
	row=$(lvs --noheadings --separator '|' -o segtype,stripes vgraid/stripe 2>&1 | tr -d ' ')
	IFS='|' read -r segtype stripes <<EOF
$row
EOF
	kv stripe.segtype "$segtype"
	kv stripe.stripes "$stripes"
	kv stripe.phase "$(vfield stripe phase)"
	kv stripe.fstype "$(findmnt -no FSTYPE /srv/stripe)"
	head -c 1M /dev/urandom >/srv/mirror/payload
	sync /srv/mirror/payload
	kv mirror.sum "$(sum /srv/mirror/payload)"
	head -c 1M /dev/urandom >/srv/secret/payload
	sync /srv/secret/payload
	kv boot1.secret.sum "$(sum /srv/secret/payload)"
	kv boot1.secret.fsuuid "$(findmnt -no UUID /srv/secret)"
	kv boot1.secret.luks "$(cryptsetup luksUUID /dev/vgenc/secret 2>&1)"
	kv boot1.secret.type "$(lsblk -no TYPE "$(findmnt -no SOURCE /srv/secret)")"
	kv boot1.secret.phase "$(vfield secret phase)"
	cp /usr/lib/ostest/three.yaml /etc/volumed/volumes.d/
	three_waits() { status_has three 'needs 3'; }
	wait_until 120 three_waits || fail "volume three does not say it waits for a third PV: $(volumed status -o json three)"
	phase "three waits"
	three_waits && kv three.waits yes
	kv three.lv "$(lvs --noheadings -o lv_name vgraid/three 2>/dev/null | tr -d ' ')"
	log_cmd volumed status three
	rm /etc/volumed/volumes.d/three.yaml
	mkdir -p /var/lib/ostest
	touch /var/lib/ostest/raid-phase2
	sync /var/lib/ostest
	done_step boot1
	systemctl poweroff
	exit 0
fi

check "volumes mirror and secret Ready after the reboot" volumed wait mirror secret --timeout 5m
phase "boot2: mirror, secret Ready"
kv boot2.secret.sum "$(sum /srv/secret/payload)"
kv boot2.secret.fsuuid "$(findmnt -no UUID /srv/secret)"
kv boot2.secret.luks "$(cryptsetup luksUUID /dev/vgenc/secret 2>&1)"
kv boot2.secret.type "$(lsblk -no TYPE "$(findmnt -no SOURCE /srv/secret)")"
kv boot2.secret.phase "$(vfield secret phase)"

# stripe: torn down (deactivated) before its PV goes.
mkdir -p /root/held
mv /etc/volumed/volumes.d/stripe.yaml /root/held/
gone() { ! mounted /srv/stripe && [ -z "$(lvfield vgraid/stripe lv_active)" ]; }
wait_until 180 gone || fail "volume stripe not torn down: $(volumed status) $(lvfield vgraid/stripe lv_active)"
# Its teardown over (the record gone) before the leg goes: the check of
# its own dm device's removal must not be what sees the PV missing.
forgotten() { [ -z "$(vfield stripe phase)" ]; }
wait_until 60 forgotten || fail "volume stripe still in the status after its teardown: $(volumed status)"

phase "stripe torn down"
# mirror: in sync before a leg goes (else the leg left may lack data).
synced() { [ "$(lvfield vgraid/mirror sync_percent)" = 100.00 ]; }
wait_until 300 synced || fail "raid1 vgraid/mirror not in sync: $(lvfield vgraid/mirror sync_percent)"
phase "mirror in sync"
done_step pull
gone_disk() { ! serial_there RAIDB; }
wait_until 120 gone_disk || fail "the disk RAIDB is still there after the host's device_del"
phase "RAIDB gone"
echo 3 >/proc/sys/vm/drop_caches
kv pulled.sum "$(sum /srv/mirror/payload)"
head -c 1M /dev/urandom >/srv/mirror/after && sync /srv/mirror/after && kv pulled.write yes
# The condition comes at the health check the disk's removal runs (the
# resync is an hour away this boot): a poll every 6 s, the cheap test
# first.
degraded() { status_has mirror PhysicalVolumeMissing && [ "$(cond_reason mirror SourceDegraded)" = PhysicalVolumeMissing ]; }
wait_every 6 240 degraded || fail "no SourceDegraded PhysicalVolumeMissing on volume mirror: $(volumed status -o json mirror)"
phase "mirror degraded"
kv pulled.reason "$(cond_reason mirror SourceDegraded)"
kv pulled.phase "$(vfield mirror phase)"
missing_metric() { metrics | grep -q '^volumed_lvm_volumegroup_missing_physical_volumes{volume_group="vgraid"} 1$'; }
wait_until 120 missing_metric && kv pulled.metric yes
phase "missing PV metric"
log_cmd volumed status mirror
log_cmd vgs --reportformat json --units b --nosuffix -o $VGFIELDS
log_cmd lvs --reportformat json --units b --nosuffix --binary -o $FIELDS vgraid

# stripe again: its LV will not activate with a PV gone.
mv /root/held/stripe.yaml /etc/volumed/volumes.d/
refused() { [ -n "$(cond_reason stripe ActivationFailed)" ]; }
wait_until 240 refused || fail "no ActivationFailed on volume stripe: $(volumed status -o json stripe)"
phase "stripe refused"
kv stripe2.reason "$(cond_reason stripe ActivationFailed)"
kv stripe2.phase "$(vfield stripe phase)"
status_has stripe 'partial LV vgraid/stripe' && kv stripe2.said yes
kv stripe2.active "$(lvs --noheadings -o lv_active vgraid/stripe 2>/dev/null | tr -d ' ')"
log_cmd volumed status stripe
done_step raid2
sleep infinity
