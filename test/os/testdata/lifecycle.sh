# The lifecycle probe: boot 1 checks the boot order and writes data, then
# reboots; boot 2 checks every volume came back unchanged, then powers off.
# The phase is kept on the root filesystem. Under TCG every process is
# about 0.2 s of the guest's one CPU: what can be read once for all
# volumes is (findmnt, readlink, sha256sum, the journal).
VOLS="data logs isc nvm"
phase=1
[ -r /var/lib/ostest/phase ] && read -r phase </var/lib/ostest/phase
log "boot $phase finished; system $(systemctl is-system-running --wait)"
out=$(systemctl is-active local-consumer.service net-consumer.service) ||
	fail "the consumers are not both active: $(printf '%s' "$out" | tr '\n' ' ')"
# The boot order's record, at the first boot (the one BootOrder checks):
# one systemd-analyze for both, seconds of emulated CPU each.
if [ "$phase" = 1 ]; then
	log "systemd-analyze critical-chain local-consumer.service net-consumer.service:"
	log_cmd systemd-analyze critical-chain --no-pager local-consumer.service net-consumer.service
fi
check "volumes Ready" volumed wait $VOLS --timeout 2m
kv small.consumer "$(systemctl show -P ActiveState small-consumer.service)"
kv small.wrote "$([ -e /srv/small/consumer-small.log ] && echo yes || echo no)"
# How each wait unit went: skipped on the agent's ready mark (no process,
# ConditionResult=no) or run (volumed wait); one systemctl for all of them.
# shellcheck disable=SC2046
systemctl show -p Id -p ConditionResult -p Result $(for v in $VOLS small; do echo volumed-wait@$v.service; done) |
	awk -F= '$1 == "Id" { id = $2 } $1 == "ConditionResult" { c = $2 } $1 == "Result" { r = $2 }
		$0 == "" && id != "" { print id, c, r; id = "" } END { if (id != "") print id, c, r }' |
	while read -r id c r; do kv "wait.$id" "condition=$c result=$r"; done
kv marks "$(ls /run/volumed/ready | tr '\n' ' ')"
log "volume small:"
log_cmd vfields 'phase|lastError' small
log_cmd volumed status
# Each volume's mount: its device and filesystem UUID.
findmnt -rn -o TARGET,SOURCE,UUID >/run/ostest-mounts
for v in $VOLS; do
	src="" uuid=""
	while read -r mp s u; do [ "$mp" = /srv/$v ] && src=$s uuid=$u; done </run/ostest-mounts
	eval "src_$v=\$src uuid_$v=\$uuid"
	kv "boot$phase.uuid.$v" "$uuid"
done
# udev in the loop: systemd-udevd probed every device while volumed
# attached and formatted it. No operation failed on EBUSY (below, from
# the journal), and the by-uuid link of each volume's filesystem leads to
# its device: one readlink -m for all (a line per path, found or not).
udevadm settle -t 30 || :
paths=""
for v in $VOLS; do eval "paths=\"\$paths /dev/disk/by-uuid/\${uuid_$v:-none} \${src_$v:-none}\""; done
# shellcheck disable=SC2086
set -- $(readlink -m $paths)
for v in $VOLS; do
	eval "uuid=\$uuid_$v src=\$src_$v"
	[ -n "$uuid" ] && [ "$1" = "$2" ] ||
		fail "/dev/disk/by-uuid/$uuid leads to $1, not to $v's device $src ($2)"
	shift 2
done
# volumed's journal of this boot, read once: operations failed on EBUSY;
# no link events (the agent watches links to retry network volumes when
# one comes up); after the reboot, a state file found damaged.
journalctl -b 0 -u volumed.service -o cat | awk -v phase="$phase" '
	/msg="operation failed"/ && tolower($0) ~ /busy/ { print "volumed, with udevd probing: " $0 }
	/no link events/ { print "volumed: " $0 }
	phase == 2 && tolower($0) ~ /damaged|moved aside/ { print "journal: " $0 }' |
	while IFS= read -r l; do fail "$l"; done
if [ "$phase" = 1 ]; then
	for v in $VOLS; do head -c 4M /dev/urandom >/srv/$v/payload; done
	sync /srv/data/payload /srv/logs/payload /srv/isc/payload /srv/nvm/payload
	mkdir -p /var/lib/ostest
	echo 2 >/var/lib/ostest/phase
	sync /var/lib/ostest/phase
fi
sha256sum /srv/data/payload /srv/logs/payload /srv/isc/payload /srv/nvm/payload |
	while read -r sum f; do
		v=${f#/srv/}
		kv "boot$phase.sum.${v%/payload}" "$sum"
	done
if [ "$phase" = 1 ]; then
	done_step boot1
	systemctl reboot
else
	done_step boot2
	systemctl poweroff
fi
