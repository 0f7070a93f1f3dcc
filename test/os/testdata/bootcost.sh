# The boot-cost benchmark's measured boot (bootcost_test.go): this unit is
# the consumer of all the volumes (ordered after each volumed-wait@, or
# after local-fs.target and the mounts). It reports when it started, the
# mount phase from systemd's monotonic stamps, and where the time went.
up=$(now)
kind=$(cat /usr/lib/ostest/bench/kind)
VOLS=$(cat /usr/lib/ostest/bench/vols)
systemctl is-system-running --wait >/dev/null
# us UNIT PROPERTY: a monotonic stamp in µs.
us() { systemctl show -P "$2" "$1"; }
sec() { awk -v a="$1" 'BEGIN { printf "%.3f", a / 1e6 }'; }
for v in $VOLS; do
	mountpoint -q /srv/$v || fail "/srv/$v is not mounted when the consumer runs"
done
kv uptime "$up"
kv consumer "$(sec "$(us bench.service ExecMainStartTimestampMonotonic)")"
lfs=$(us local-fs.target ActiveEnterTimestampMonotonic)
case $kind in
volumed | onewait)
	check "volumes Ready" volumed wait $VOLS --timeout 30s
	start=$(us volumed.service ExecMainStartTimestampMonotonic)
	ready=$(us volumed.service ActiveEnterTimestampMonotonic)
	# The wait units: how many ran volumed wait (the others were skipped
	# on the agent's ready mark), and when the last of them finished.
	# shellcheck disable=SC2046
	set -- $(systemctl show -p ConditionResult -p ActiveEnterTimestampMonotonic $(for v in $VOLS; do echo volumed-wait@$v.service; done) |
		awk -F= '$1 == "ConditionResult" && $2 == "yes" { ran++ }
			$1 == "ActiveEnterTimestampMonotonic" && $2 > last { last = $2 }
			END { print ran + 0, last + 0 }')
	ran=$1 last=$2
	kv mount "$(sec $((ready - start)))"
	agent=$(journalctl -b 0 -u volumed.service -o cat | grep -E 'volumed starting|actual state reconstructed|msg=converged' |
		sed -n 's/.*msg="*\([a-z ]*\)"*.*\(setup=[^ ]*\).*/\1 \2/p; s/.*msg="actual state reconstructed".*\(manifests=[^ ]*\) \(reconstruct=[^ ]*\).*/reconstructed \1 \2/p' | tr '\n' ';')
	kv extra "local-fs=$(sec $lfs) agent-start=$(sec $start) READY=$(sec $ready) waits-run=$ran last-wait@=$(sec $last);$agent"
	;;
fstab)
	first=
	for v in $VOLS; do
		m=$(us srv-$v.mount InactiveExitTimestampMonotonic)
		[ -z "$first" ] || [ "$m" -lt "$first" ] && first=$m
	done
	kv mount "$(sec $((lfs - first)))"
	kv extra "first-mount=$(sec $first) local-fs=$(sec $lfs) agent-start=$(sec "$(us volumed.service ExecMainStartTimestampMonotonic)")"
	;;
esac
log "systemd-analyze critical-chain bench.service:"
log_cmd systemd-analyze critical-chain --no-pager bench.service
log "systemd-analyze blame (top 12):"
systemd-analyze blame --no-pager | head -n 12 | while IFS= read -r l; do log "$l"; done
journalctl -b 0 -u volumed.service -o short-monotonic | head -n 8 | while IFS= read -r l; do log "$l"; done
done_step measured
systemctl poweroff
