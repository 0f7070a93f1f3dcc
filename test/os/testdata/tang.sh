# The tang probe (issue 26), two boots of one machine: see TestTang.
# Servers: near (127.0.0.1:7500) at every boot; far (127.0.0.1:7501) at
# the first boot only, started by this script at the second. The guest has
# a TPM2 (swtpm on the host, its state kept across the boots) for both.
phase=1
[ -e /var/lib/ostest/tang-phase2 ] && phase=2
b=boot$phase
img() { echo "/var/lib/ostest/$1.img"; }
token_of() { cryptsetup luksDump "$(img "$1")" 2>/dev/null | grep -o -m1 -E "$2" || echo none; }
sum_of() { sha256sum </srv/$1/payload 2>/dev/null | cut -d' ' -f1; }
status_json() { volumed status -o json "$1" 2>/dev/null | tr -d '\n\t' | sed 's/  */ /g'; }
agent_id() { echo "$(systemctl show -P MainPID volumed.service)/$(systemctl show -P NRestarts volumed.service)"; }
# recovery_in_journal FILE: the key in FILE is in volumed's journal (read
# from the file: a key on a command line is in /proc for all to see).
recovery_in_journal() { journalctl -u volumed --no-pager -o cat | grep -qF -f "$1"; }

if [ "$phase" = 1 ]; then
	kv versions "$(dpkg-query -W -f '${Package}=${Version} ' tang-common jose cryptsetup-bin systemd 2>&1)"
	kv boot1.tpm "$(ls /dev/tpmrm0 2>&1)"
	if ! volumed wait near far pair rec both --timeout 5m >/dev/null 2>&1; then
		fail "volumes not Ready at the first boot: $(volumed status 2>&1 | tr '\n' ' ')"
		log_cmd journalctl -u volumed --no-pager -n 60
	fi
	for v in near far pair rec both; do
		kv boot1.$v.phase "$(vfield $v phase)"
		kv boot1.$v.token "$(token_of $v clevis)"
		head -c 1M /dev/urandom >/srv/$v/payload
		sync /srv/$v/payload
		kv boot1.$v.sum "$(sum_of $v)"
	done
	# Its only key is the threshold: the clevis token is the first.
	kv boot1.both.clevis "$(cryptsetup token export --token-id 0 "$(img both)" 2>&1 | tr -d '\n')"
	log_cmd volumed status
	# The agent's open or grow may be running: recovery-key asks again.
	out=""
	for i in $(seq 1 50); do
		out=$(volumed recovery-key rec 2>&1) && break
		out=""
		sleep 0.5
	done
	key=$(printf '%s\n' "$out" | sed -n 's/^    \([a-z]\{8\}\(-[a-z]\{8\}\)\{7\}\)$/\1/p')
	[ -n "$key" ] || fail "volumed recovery-key rec printed no key: $(printf '%s' "$out" | tr '\n' ' ')"
	# The paper the person writes it on.
	(umask 077; printf '%s' "$key" >/var/lib/ostest/rec.recovery)
	kv boot1.rec.recovery "$(token_of rec systemd-recovery)"
	recovery_in_journal /var/lib/ostest/rec.recovery && fail "the recovery key is in volumed's journal"
	# The key file is lost; the far server is down at the next boot.
	head -c 64 /dev/urandom >/etc/volumed/secrets/rec.key
	rm -f /etc/systemd/system/sockets.target.wants/ostest-tangfar.socket
	touch /var/lib/ostest/tang-phase2
	sync
	done_step boot1
	systemctl reboot
	exit 0
fi

# Boot 2: near opens at boot, its server up.
check "near Ready at boot" volumed wait near --timeout 4m
kv boot2.near.phase "$(vfield near phase)"
kv boot2.near.sum "$(sum_of near)"
reason_is() { volumed status -o json "$1" 2>/dev/null | grep -q "\"reason\": \"$2\""; }
for v in far pair late both; do
	wait_until 180 reason_is $v WaitingForKeyServer || fail "$v is not waiting for its key server: $(status_json $v)"
	kv boot2.$v.waiting "$(status_json $v)"
done
wait_until 180 reason_is rec NoKeyOpens || fail "rec is not Locked: $(status_json rec)"
kv boot2.rec.locked "$(status_json rec)"
kv boot2.far.text "$(volumed status far 2>&1 | tr '\n' '|')"
log "volumed status far, its server down:"
log_cmd volumed status far
log_cmd volumed status pair late rec
if cryptsetup isLuks "$(img late)" 2>/dev/null; then
	kv boot2.late.header luks
else
	kv boot2.late.header none
fi
kv agent.before "$(agent_id)"

# The person with the recovery key types it where cryptsetup asks, opening
# the volume's mapping; volumed adopts it.
dev=$(vfield rec device)
log "opening rec ($dev) with its recovery key as volumed-rec"
check "cryptsetup open rec with the recovery key" sh -c "cryptsetup open --type luks2 '$dev' volumed-rec </var/lib/ostest/rec.recovery"

log "starting the far tang server"
systemctl start ostest-tangfar.socket
if ! volumed wait far pair late rec both --timeout 5m >/dev/null 2>&1; then
	fail "not Ready once the far server is up and rec is open: $(volumed status 2>&1 | tr '\n' ' ')"
	log_cmd journalctl -u volumed --no-pager -n 60
fi
for v in far pair late rec both; do
	kv after.$v.phase "$(vfield $v phase)"
	kv after.$v.sum "$(sum_of $v)"
done
kv after.late.token "$(token_of late clevis)"
kv agent.after "$(agent_id)"
log_cmd volumed status
recovery_in_journal /var/lib/ostest/rec.recovery && fail "the recovery key is in volumed's journal"
done_step boot2
