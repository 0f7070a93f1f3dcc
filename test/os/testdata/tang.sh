# The tang probe (issue 26), two boots of one machine: see TestTang.
# Servers: near (127.0.0.1:7500) at every boot; far (127.0.0.1:7501) at
# the first boot only, started by this script at the second. The guest has
# a TPM2 (swtpm on the host, its state kept across the boots) for both.
# Under TCG every process is ~0.2 s of the guest's one CPU: what is read
# of many volumes is read once (vfields, vjson, one sha256sum).
phase=1
[ -e /var/lib/ostest/tang-phase2 ] && phase=2
b=boot$phase
img() { echo "/var/lib/ostest/$1.img"; }
# token_of VOLUME WORD: WORD if the volume's LUKS header has a token of
# that type, else none.
token_of() {
	case $(cryptsetup luksDump "$(img "$1")" 2>/dev/null) in
	*"$2"*) echo "$2" ;;
	*) echo none ;;
	esac
}
# kv_volumes PREFIX VOLUME...: kv PREFIX.VOLUME.phase and PREFIX.VOLUME.sum
# (the sha256 of its payload) of each volume.
kv_volumes() {
	p=$1
	shift
	vfields phase "$@" | while read -r v ph; do kv "$p.$v.phase" "$ph"; done
	files=""
	for v in "$@"; do files="$files /srv/$v/payload"; done
	sha256sum $files 2>/dev/null | while read -r s f; do f=${f#/srv/}; kv "$p.${f%/payload}.sum" "$s"; done
}
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
		kv boot1.$v.token "$(token_of $v clevis)"
		head -c 1M /dev/urandom >/srv/$v/payload
	done
	sync /srv/near/payload /srv/far/payload /srv/pair/payload /srv/rec/payload /srv/both/payload
	kv_volumes boot1 near far pair rec both
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
kv_volumes boot2 near
# locked: far, pair, late and both wait for the far server and rec's key
# opens nothing, each as its condition says; their status, one volume a
# line, is in /run/ostest-locked (one volumed status for the five).
locked() {
	vjson far pair late both rec >/run/ostest-locked
	n=0
	while read -r v j; do
		case $v in rec) r=NoKeyOpens ;; *) r=WaitingForKeyServer ;; esac
		case $j in *"\"reason\": \"$r\""*) n=$((n + 1)) ;; esac
	done </run/ostest-locked
	[ $n = 5 ]
}
if ! wait_until 180 locked; then
	for v in far pair late both rec; do
		case $v in rec) r=NoKeyOpens ;; *) r=WaitingForKeyServer ;; esac
		j=$(grep "^$v " /run/ostest-locked)
		case $j in *"\"reason\": \"$r\""*) ;; *) fail "$v is not Locked with $r: $j" ;; esac
	done
fi
while read -r v j; do
	case $v in
	rec) kv boot2.rec.locked "$j" ;;
	*) kv boot2.$v.waiting "$j" ;;
	esac
	# The device rec is on, for the person below.
	[ "$v" = rec ] && dev=${j#*\"device\": \"} && dev=${dev%%\"*}
done </run/ostest-locked
text=$(volumed status far 2>&1)
kv boot2.far.text "$(printf '%s' "$text" | tr '\n' '|')"
log "volumed status far, its server down:"
printf '%s\n' "$text" | while IFS= read -r l; do log "$l"; done
log_cmd volumed status pair late rec
if cryptsetup isLuks "$(img late)" 2>/dev/null; then
	kv boot2.late.header luks
else
	kv boot2.late.header none
fi
kv agent.before "$(agent_id)"

# The person with the recovery key types it where cryptsetup asks, opening
# the volume's mapping; volumed adopts it.
log "opening rec ($dev) with its recovery key as volumed-rec"
check "cryptsetup open rec with the recovery key" sh -c "cryptsetup open --type luks2 '$dev' volumed-rec </var/lib/ostest/rec.recovery"

log "starting the far tang server"
systemctl start ostest-tangfar.socket
if ! volumed wait far pair late rec both --timeout 5m >/dev/null 2>&1; then
	fail "not Ready once the far server is up and rec is open: $(volumed status 2>&1 | tr '\n' ' ')"
	log_cmd journalctl -u volumed --no-pager -n 60
fi
kv_volumes after far pair late rec both
kv after.late.token "$(token_of late clevis)"
kv agent.after "$(agent_id)"
log_cmd volumed status
recovery_in_journal /var/lib/ostest/rec.recovery && fail "the recovery key is in volumed's journal"
done_step boot2
