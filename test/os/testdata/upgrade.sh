# The upgrade probe: with every volume Ready and the consumers running,
# dpkg -i a newer build of the package; the agent restarts on the new
# binary and nothing is unmounted, remounted or taken down.
VOLS="data logs isc nvm"
systemctl is-system-running --wait >/dev/null
check "volumes Ready before the upgrade" volumed wait $VOLS --timeout 2m
# mountinfo: mount ID, parent, major:minor, root, mount point, options...
# One grep for all (a process is about 0.2 s of the emulated CPU).
mounts() { grep -E " /srv/(data|logs|isc|nvm) " /proc/self/mountinfo; }
# ids MOUNTINFO: mount ID and mount point of each line, for the log.
ids() { printf '%s\n' "$1" | while read -r id _ _ _ mp _; do printf '%s %s ' "$id" "$mp"; done; }
before=$(mounts)
log "mounts before: $(ids "$before")"
# shellcheck disable=SC2046
set -- $(systemctl show -P MainPID volumed.service local-consumer.service net-consumer.service)
pid_before=$1 consumers_before="$2 $3"
kv version.before "$(volumed version)"
cursor=$(journalctl -n 0 --show-cursor | sed -n 's/^-- cursor: //p')

out=$(dpkg -i /var/cache/ostest/volumed-new.deb 2>&1) || fail "dpkg -i: $out"
log_cmd echo "$out"
kv version.after "$(volumed version)"
wait_until 120 systemctl is-active -q volumed.service || fail "volumed.service is not active after the upgrade: $(systemctl is-active volumed.service)"
pid_after=$(systemctl show -P MainPID volumed.service)
kv agent.restarted "$([ "$pid_before" != "$pid_after" ] && echo yes || echo no)"
kv agent.binary "$(readlink /proc/$pid_after/exe)"
check "volumes Ready after the upgrade" volumed wait $VOLS --timeout 2m
vfields phase $VOLS | while read -r v p; do kv "after.phase.$v" "$p"; done
after=$(mounts)
log "mounts after: $(ids "$after")"
[ "$before" = "$after" ] || fail "mountinfo of the volumes changed: before [$before] after [$after]"
# shellcheck disable=SC2046
set -- $(systemctl show -P MainPID local-consumer.service net-consumer.service)
consumers_after="$1 $2"
[ "$consumers_before" = "$consumers_after" ] || fail "consumers restarted: $consumers_before -> $consumers_after"
# What systemd did to the units during the upgrade (the journal read once).
journalctl --after-cursor="$cursor" -o cat _PID=1 | grep -E "volumed|srv-|consumer" | while read -r l; do
	log "pid1: $l"
	case $l in
	*"Stopping volumed-network"* | *"Unmounting srv-"* | *"Stopping local-consumer"* | *"Stopping net-consumer"*) fail "during the upgrade: $l" ;;
	esac
done
# The ready marks (volumed-wait@) when the agent is killed: systemd
# removes /run/volumed/ready as it dies (RuntimeDirectory=), before its
# restart (RestartSec=5s) makes them again from what it finds.
# marked: a mark for every volume (a pass after the one that saw it Ready
# makes it).
marked() { for v in $VOLS; do [ -e /run/volumed/ready/$v ] || return 1; done; }
wait_until 20 marked || :
kv marks.before "$(ls /run/volumed/ready | tr '\n' ' ')"
systemctl kill -s KILL volumed.service
kv marks.killed "$(wait_until 20 test ! -e /run/volumed/ready && echo gone || echo kept)"
check "volumes Ready after a SIGKILL" volumed wait $VOLS --timeout 2m
wait_until 20 marked || :
kv marks.after "$(ls /run/volumed/ready | tr '\n' ' ')"
# The host cuts the power: the shutdown is TestLifecycle's.
done_step upgrade
