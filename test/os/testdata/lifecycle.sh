# The lifecycle probe: boot 1 checks the boot order and writes data, then
# reboots; boot 2 checks every volume came back unchanged, then powers off.
# The phase is kept on the root filesystem.
VOLS="data logs isc nvm"
phase=$(cat /var/lib/ostest/phase 2>/dev/null || echo 1)
systemctl is-system-running --wait >/dev/null
log "boot $phase finished; system $(systemctl is-system-running)"
for c in local-consumer net-consumer; do
	check "$c is active" systemctl is-active $c.service
	log "systemd-analyze critical-chain $c.service:"
	log_cmd systemd-analyze critical-chain --no-pager $c.service
done
check "volumes Ready" volumed wait $VOLS --timeout 2m
kv small.consumer "$(systemctl show -P ActiveState small-consumer.service)"
kv small.wrote "$([ -e /srv/small/consumer-small.log ] && echo yes || echo no)"
log "volume small: $(vfield small phase): $(vfield small lastError)"
log_cmd volumed status
for v in $VOLS; do
	kv "boot$phase.uuid.$v" "$(findmnt -no UUID /srv/$v)"
done
if [ "$phase" = 1 ]; then
	for v in $VOLS; do
		head -c 4M /dev/urandom >/srv/$v/payload
		sync /srv/$v/payload
	done
	mkdir -p /var/lib/ostest
	echo 2 >/var/lib/ostest/phase
	sync /var/lib/ostest/phase
fi
for v in $VOLS; do
	kv "boot$phase.sum.$v" "$(sha256sum </srv/$v/payload | cut -d' ' -f1)"
done
if [ "$phase" = 1 ]; then
	done_step boot1
	systemctl reboot
else
	journalctl -b 0 -u volumed.service | grep -iE "damaged|moved aside" | while read -r l; do fail "journal: $l"; done
	done_step boot2
	systemctl poweroff
fi
