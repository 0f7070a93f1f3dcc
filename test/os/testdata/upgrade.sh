# The upgrade probe: with every volume Ready and the consumers running,
# dpkg -i a newer build of the package; the agent restarts on the new
# binary and nothing is unmounted, remounted or taken down.
VOLS="data logs isc nvm"
systemctl is-system-running --wait >/dev/null
check "volumes Ready before the upgrade" volumed wait $VOLS --timeout 2m
# mountinfo: mount ID, parent, major:minor, root, mount point, options...
mounts() { for v in $VOLS; do grep " /srv/$v " /proc/self/mountinfo; done; }
before=$(mounts)
log "mounts before: $(echo "$before" | cut -d' ' -f1,5 | tr '\n' ' ')"
pid_before=$(systemctl show -P MainPID volumed.service)
consumers_before=$(systemctl show -P MainPID local-consumer.service net-consumer.service | tr '\n' ' ')
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
for v in $VOLS; do kv "after.phase.$v" "$(vfield $v phase)"; done
after=$(mounts)
log "mounts after: $(echo "$after" | cut -d' ' -f1,5 | tr '\n' ' ')"
[ "$before" = "$after" ] || fail "mountinfo of the volumes changed: before [$before] after [$after]"
consumers_after=$(systemctl show -P MainPID local-consumer.service net-consumer.service | tr '\n' ' ')
[ "$consumers_before" = "$consumers_after" ] || fail "consumers restarted: $consumers_before -> $consumers_after"
# What systemd did to the units during the upgrade.
journalctl --after-cursor="$cursor" -o cat _PID=1 | grep -E "volumed|srv-|consumer" | while read -r l; do log "pid1: $l"; done
journalctl --after-cursor="$cursor" -o cat _PID=1 | grep -E "Stopping volumed-network|Unmounting srv-|Stopping (local|net)-consumer" |
	while read -r l; do fail "during the upgrade: $l"; done
done_step upgrade
systemctl poweroff
