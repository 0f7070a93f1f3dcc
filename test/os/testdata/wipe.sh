# The wipe probe (issue 22): with the guest's own device-mapper, LVM and
# LUKS, volumed refuses a disk something outside it holds, and wipes it
# once that use has stopped.
#
#   held: a disk volume whose disk a dm table (ostest-hold, made before
#         volumed starts) holds is refused at attach with InUse, never
#         formatted; once the table is removed the volume comes up.
#   lvm:  `volumed wipe --yes` refuses a disk an active VG is on, naming
#         the holder, and leaves every byte; after vgchange -an it wipes
#         it and the disk is blank by the rule (`volumed disks`).
#   luks: the same with an open LUKS mapping, then cryptsetup close.
HELD=/dev/disk/by-id/virtio-HELD
systemctl is-system-running --wait >/dev/null

# status_of VOLUME: the volume's status, one line (JSON).
status_of() { volumed status -o json "$1" 2>&1 | tr -d '\n'; }
# cond_message VOLUME TYPE: the message of the volume's condition TYPE.
cond_message() {
	status_of "$1" | sed -n "s/.*\"type\": *\"$2\", *\"reason\": *\"\([^\"]*\)\", *\"message\": *\"\([^\"]*\)\".*/\1: \2/p"
}
# has_inuse: held has an InUse condition (one process a poll: under TCG
# each is ~0.2 s of the one CPU the agent needs).
has_inuse() {
	case $(volumed status -o json held 2>&1) in *'"type": "InUse"'*) ;; *) return 1 ;; esac
}
# blank_by_disks SERIAL: what `volumed disks` says of the disk, and
# whether a selector asking for a blank disk of that serial picks it.
# One volumed disks --match, its table (every disk's content) logged.
blank_by_disks() {
	out=$(volumed disks --match "disk.serial == \"$1\" && disk.blank" 2>&1)
	printf '%s\n' "$out" | while IFS= read -r l; do say "OSTEST-LOG $l"; done
	case $out in
	*"
picks /dev/"*) echo yes ;;
	*) echo no ;;
	esac
}
# keep DEVICE NAME: a copy of every byte of DEVICE in /dev/shm/ostest-NAME;
# same DEVICE NAME: yes if DEVICE still holds exactly those bytes (cmp:
# a sha256 of the 64 MiB disks twice over was seconds of emulated CPU).
keep() { cat "$1" >/dev/shm/ostest-$2; }
same() { if cmp -s "$1" /dev/shm/ostest-$2; then echo yes; else echo no; fi; rm -f /dev/shm/ostest-$2; }

# --- held: the disk volume is refused while ostest-hold holds its disk.
wait_until 180 has_inuse || fail "volume held has no InUse condition: $(status_of held)"
kv held.inuse "$(cond_message held InUse)"
kv held.phase "$(vfield held phase)"
kv held.mounted "$(findmnt -n /srv/held >/dev/null && echo yes || echo no)"
kv held.signature "$(blkid -p -o value -s TYPE $HELD)"
check "dmsetup remove ostest-hold" dmsetup remove ostest-hold
log "ostest-hold removed: volume held should come up by itself"

# --- lvm: an active VG (one linear LV with 8 MiB of payload) on the disk.
LVM=/dev/disk/by-id/virtio-WIPELVM
check pvcreate pvcreate -q $LVM
check vgcreate vgcreate -q vgwipe $LVM
check lvcreate lvcreate -q -y -n lv0 -L 16M vgwipe
check "payload into the LV" dd if=/dev/urandom of=/dev/vgwipe/lv0 bs=1M count=8 oflag=direct status=none
keep $LVM lvm-disk
keep /dev/vgwipe/lv0 lvm-lv
log_cmd volumed disks
out=$(volumed wipe --yes $LVM 2>&1)
kv lvm.refused.rc $?
kv lvm.refused.says "$(printf '%s' "$out" | tr '\n' ' ')"
kv lvm.disk.same "$(same $LVM lvm-disk)"
kv lvm.lv.same "$(same /dev/vgwipe/lv0 lvm-lv)"
kv lvm.lv.active "$(lvs --noheadings -o lv_active vgwipe/lv0 2>&1 | tr -d ' ')"
check "vgchange -an vgwipe" vgchange -q -an vgwipe
out=$(volumed wipe --yes $LVM 2>&1)
kv lvm.wiped.rc $?
log_cmd printf '%s\n' "$out"
kv lvm.blank "$(blank_by_disks WIPELVM)"
kv lvm.after.signature "$(blkid -p -o value -s TYPE $LVM)"
kv lvm.after.vg "$(vgs --noheadings -o vg_name vgwipe 2>/dev/null | tr -d ' ')"

# --- luks: an open LUKS2 mapping with 8 MiB of payload.
LUKS=/dev/disk/by-id/virtio-WIPELUKS
printf 'ostest secret' >/run/ostest-key
check luksFormat cryptsetup luksFormat -q --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file /run/ostest-key $LUKS
check "cryptsetup open" cryptsetup open --key-file /run/ostest-key $LUKS ostest-crypt
check "payload into the mapping" dd if=/dev/urandom of=/dev/mapper/ostest-crypt bs=1M count=8 oflag=direct status=none
keep $LUKS luks-disk
keep /dev/mapper/ostest-crypt luks-map
out=$(volumed wipe --yes $LUKS 2>&1)
kv luks.refused.rc $?
kv luks.refused.says "$(printf '%s' "$out" | tr '\n' ' ')"
kv luks.disk.same "$(same $LUKS luks-disk)"
kv luks.map.same "$(same /dev/mapper/ostest-crypt luks-map)"
kv luks.header "$(cryptsetup isLuks $LUKS && echo yes || echo no)"
check "cryptsetup close" cryptsetup close ostest-crypt
out=$(volumed wipe --yes $LUKS 2>&1)
kv luks.wiped.rc $?
log_cmd printf '%s\n' "$out"
kv luks.blank "$(blank_by_disks WIPELUKS)"
kv luks.after.signature "$(blkid -p -o value -s TYPE $LUKS)"

# --- held, released: the volume comes up on the disk, formatted by volumed.
volumed wait held --timeout 240s >/dev/null 2>&1 || fail "volume held not Ready after ostest-hold was removed: $(status_of held)"
kv held.after.phase "$(vfield held phase)"
kv held.after.fstype "$(findmnt -no FSTYPE /srv/held)"
# Woken by the dm table's removal, not at the end of its backoff.
kv held.woken "$(journalctl -b -o cat -u volumed.service | grep 'retrying waiting volumes now' | grep 'block device removed' | grep -c held)"
log_cmd volumed status
# The host cuts the power: nothing is left to check.
done_step wipe
