# vmtest: timeout=180
# The agent with encrypted volumes (spec.encryption.luks2, key files) on
# loop images: a blank image gets a LUKS2 header, is opened as
# /dev/mapper/volumed-NAME, formatted and mounted; a restart adopts the
# mapping (nothing reopened); a SIGKILL at each crash point of encrypt,
# open and close, and before the mkfs after an open, converges with the
# data intact and no second luksFormat; a reboot (mounts, mappings and
# loop devices gone by hand, the state kept) reopens with the key; a
# grown image grows the mapping and ext4 online; a wrong key leaves the
# volume Locked and its header byte-identical; a removed manifest
# unmounts, closes and detaches. No key is ever in a process's argv or
# environment, the log, the status, the metrics or the state file. The
# open latency is logged.

modprobe dm-crypt && modprobe xts && modprobe algif_skcipher || fail "modprobe dm-crypt, xts, algif_skcipher"
[ -c /dev/mapper/control ] || fail "no /dev/mapper/control after loading dm-mod"
AGENT_ARGS="--metrics-address 127.0.0.1:9761"

# Keys are printable so grep can look for them; root-owned, 0600.
umask 077
mkdir -p $VT_DIR/keys
key() { head -c 32 /dev/urandom | sha256sum | cut -c1-64 > $VT_DIR/keys/$1; }
key good
key wrong
key theirs
umask 022
cat $VT_DIR/keys/* > $VT_DIR/keys.pat

# enc_manifest NAME KEY...: luks_manifest with the key files named.
# The keys are random, so the keyslots use pbkdf2 (1000 iterations):
# argon2id, the default, costs tens of seconds per open under TCG (the
# luks scenario times it).
enc_manifest() {
	local name=$1 keys= k
	shift
	for k in "$@"; do keys="$keys${keys:+, }{file: $VT_DIR/keys/$k}"; done
	luks_manifest $name "$keys"
}

# finished OP [VOLUME]: how many OP operations (of VOLUME) finished, by the log.
finished() { grep '"msg":"operation finished"' $ALOG | grep "\"volume\":\"${2:-[a-z]*}\"" | grep -c "\"operation\":\"$1\""; }
# said MSG VOLUME: how many times the log says MSG about VOLUME.
said() { grep "\"msg\":\"$1\"" $ALOG | grep -c "\"volume\":\"$2\""; }
# header NAME: the sha256 of the first 16 MiB of NAME's image (the LUKS2 header area).
header() { dd if=$IMG/$1.img bs=1M count=16 2>/dev/null | sha256sum | cut -d' ' -f1; }
mapped() { [ -b /dev/mapper/volumed-$1 ]; }
enc_state() { vstatus $1 2>/dev/null | sed -n 's/^      "state": "\(.*\)",*$/\1/p'; }

# crash_at POINT: the agent, stopped before the manifests changed (a
# running agent would act on the change itself, before the crash point is
# armed), starts with the crash point and dies at it.
crash_at() {
	agent_stop
	agent_start VOLUMED_CRASH_AT=$1
	agent_crashed 90
	log "crashed at $1"
}

sampler_on

# 1. Format, open, mkfs, mount; data written.
enc_manifest ca good
agent_up
ready 120 ca
mapped ca || fail "no /dev/mapper/volumed-ca"
check_rw $MNT/ca crypt-ca
[ "$(enc_state ca)" = open ] || fail "ca's encryption state is '$(enc_state ca)', want open: $(vstatus ca)"
vstatus ca | grep -q '"keyKind": "file"' || fail "ca's status does not say a file key opened it: $(vstatus ca)"
grep -q "^/dev/mapper/volumed-ca $MNT/ca " /proc/mounts || fail "$MNT/ca is not the mapping: $(grep $MNT/ca /proc/mounts)"
dev=$(vfield ca device)
[ "$(cat /sys/block/${dev#/dev/}/holders/*/dm/name)" = volumed-ca ] || fail "the mapping is not on ca's device $dev"
grep -q -F "crypt-ca" $IMG/ca.img && fail "ca's image holds the plaintext"
expect_count "encrypts of ca" "$(finished encrypt ca)" 1
wget -q -O - http://127.0.0.1:9761/metrics > $VT_DIR/metrics || fail "scrape the metrics"
grep -q '^volumed_volume_encrypted{volume="ca"} 1$' $VT_DIR/metrics || fail "no volumed_volume_encrypted{volume=\"ca\"} 1: $(grep encrypted $VT_DIR/metrics)"

# 2. A restart adopts the mapping: nothing opened again.
agent_stop
agent_up
ready 30 ca
expect_count "opens of ca after a restart" "$(finished open ca)" 1
[ "$(said 'adopting the open mapping' ca)" -ge 1 ] || fail "the restart did not say it adopted ca's mapping"
vstatus ca | grep -q '"keyKind": "file"' || fail "the key kind was lost at the restart: $(vstatus ca)"
check_has $MNT/ca crypt-ca
wget -q -O - http://127.0.0.1:9761/metrics > $VT_DIR/metrics || fail "scrape the metrics"
grep -q 'operation="open"' $VT_DIR/metrics && fail "the restarted agent ran an open: $(grep 'operation="open"' $VT_DIR/metrics)"

# 3. Crashes in encrypt: before the header and after it, and between
# open and mkfs. Each converges with one header (the intent's UUID),
# written once.
agent_stop
enc_manifest cb good
crash_at encrypt:after-intent
[ "$(header cb)" = "$(dd if=/dev/zero bs=1M count=16 2>/dev/null | sha256sum | cut -d' ' -f1)" ] ||
	fail "cb's image is not blank after a crash before luksFormat"
# Then between the open and the mkfs: the mkfs goes on the mapping.
crash_at format:after-intent
mapped cb || fail "no volumed-cb after a crash between open and mkfs"
agent_up
ready 120 cb
grep -q "^/dev/mapper/volumed-cb $MNT/cb ext4 " /proc/mounts || fail "cb's ext4 is not on its mapping: $(grep $MNT/cb /proc/mounts)"
check_rw $MNT/cb crypt-cb
agent_stop
enc_manifest cc good
crash_at encrypt:after-kernel
before=$(header cc)
uuid=$(cryptsetup luksUUID $IMG/cc.img) || fail "no LUKS2 header on cc after a crash after luksFormat"
agent_up
ready 120 cc
[ "$(header cc)" = "$before" ] || fail "cc's header was written again after a crash after luksFormat"
[ "$(cryptsetup luksUUID $IMG/cc.img)" = "$uuid" ] || fail "cc's LUKS2 UUID changed"
check_rw $MNT/cc crypt-cc

# 4. Crashes in open, after a reboot (the three volumes open at once;
# whichever reaches the point first kills the agent): before the mapping
# and after it (adopted, not reopened). Then a plain reboot reopens them
# with the key.
adoptions() { grep -c '"msg":"adopting the open mapping"' $ALOG; }
fake_reboot
crash_at open:after-intent
agent_up
ready 120 ca cb cc
check_has $MNT/ca crypt-ca
fake_reboot
crash_at open:after-kernel
ls /dev/mapper/volumed-* >/dev/null 2>&1 || fail "no mapping after a crash after an open"
n=$(adoptions)
agent_up
ready 120 ca cb cc
[ "$(adoptions)" -gt $n ] || fail "the mapping the crashed open made was not adopted"
check_has $MNT/ca crypt-ca
check_has $MNT/cb crypt-cb
check_has $MNT/cc crypt-cc
# The sampler (a busy loop over /proc) is paused while the opens are timed.
fake_reboot
sampler_off
agent_up
ready 120 ca cb cc
sampler_on
check_has $MNT/ca crypt-ca
expect_count "encrypts in all" "$(finished encrypt)" 3
# The opens of this boot are plain opens (no header written), three at once.
grep '"msg":"operation finished"' $ALOG | grep '"operation":"open"' | tail -n 3 | grep -o '"duration":[0-9]*' | cut -d: -f2 > $VT_DIR/opens
wget -q -O - http://127.0.0.1:9761/metrics > $VT_DIR/metrics2 || fail "scrape the metrics"

# 4b. Growth: a larger image grows the loop device, then the mapping
# (cryptsetup resize, with the key), then ext4 on it, online.
SIZE=96Mi
FS_OPTS=", grow: true"
enc_manifest ca good
SIZE=
FS_OPTS=
dev=$(vfield ca device)
mapsize() { echo $(($(cat /sys/block/${dev#/dev/}/holders/*/size) * 512)); }
fssize() { stat -f -c %b $MNT/ca; }
before=$(fssize)
wait_until 60 is $((80 << 20)) mapsize || fail "ca's mapping is $(mapsize) bytes, want 80 MiB (96 MiB less the header)"
grown() { [ "$(fssize)" -gt "$before" ]; }
wait_until 30 grown || fail "ca's ext4 did not grow: $(fssize) blocks, was $before"
check_has $MNT/ca crypt-ca
log "ca grown online: mapping 80 MiB, ext4 $before -> $(fssize) blocks"

# 5. Crashes in close, with the manifests removed: the restart finishes
# the teardown (unmounted, closed, detached).
agent_stop
rm_manifest cb
crash_at close:after-intent
mapped cb || fail "volumed-cb gone after a crash before the close"
mounted $MNT/cb && fail "$MNT/cb still mounted at the close"
agent_up
wait_until 60 gone cb || fail "cb still listed after the restart: $(vstatus cb)"
mapped cb && fail "volumed-cb still open after cb went"
agent_stop
rm_manifest cc
crash_at close:after-kernel
agent_up
wait_until 60 gone cc || fail "cc still listed after the restart: $(vstatus cc)"
mapped cc && fail "volumed-cc still open after cc went"
losetup -a | grep -q -e "$IMG/cb.img" -e "$IMG/cc.img" && fail "a loop device of cb or cc is left: $(losetup -a)"

# 6. A header none of the keys opens: Locked, the reasons named, the
# header not touched, by the agent's tries nor by the teardown.
truncate -s 64M $IMG/cw.img
cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
	--key-file $VT_DIR/keys/theirs $IMG/cw.img || fail "make cw's foreign header"
before=$(header cw)
enc_manifest cw wrong
locked() { vstatus cw 2>/dev/null | grep -q '"type": "Locked"'; }
wait_until 60 locked || fail "cw is not Locked: $(vstatus cw)"
[ "$(enc_state cw)" = locked ] || fail "cw's encryption state is '$(enc_state cw)', want locked"
vstatus cw | grep -q "key 0 (file $VT_DIR/keys/wrong): does not match any keyslot" ||
	fail "the Locked condition does not name the key and why: $(vstatus cw)"
mapped cw && fail "volumed-cw exists"
vstatus > $VT_DIR/status.json || fail "status"
[ "$(header cw)" = "$before" ] || fail "cw's header changed while it was Locked"
rm_manifest cw
wait_until 60 gone cw || fail "cw still listed 60s after its manifest was removed"
[ "$(header cw)" = "$before" ] || fail "cw's header changed at its teardown"

# 7. Removing the last manifest: unmounted, closed, detached.
rm_manifest ca
wait_until 60 gone ca || fail "ca still listed 60s after its manifest was removed"
mounted $MNT/ca && fail "$MNT/ca still mounted"
mapped ca && fail "volumed-ca still open"
expect_count "loop devices left" "$(losetup -a | wc -l)" 0
expect_count "mounts under $VT_DIR" "$(mounts_under $VT_DIR)" 0

# 8. No key anywhere it must not be.
sampler_off
agent_stop
[ -s $VT_DIR/leaks ] && fail "a key was in /proc: $(sort -u $VT_DIR/leaks | tr '\n' ' ')"
[ -s $VT_DIR/seen ] || fail "the sampler never saw cryptsetup running: the /proc check proved nothing"
grep -l -F -f $VT_DIR/keys.pat $ALOG $STATE/state.db $VT_DIR/metrics $VT_DIR/metrics2 $VT_DIR/status.json &&
	fail "a key is in the log, the state file, the metrics or the status"
log "/proc samples with cryptsetup running: $(sort -u $VT_DIR/seen | wc -l) processes, none held a key in argv or environ"
log "open latency per volume (pbkdf2 keyslot, 3 volumes at once, TCG): $(awk '{ s += $1; n++; if ($1 > m) m = $1 } END { printf "%.3f s mean, %.3f s max over %d opens", s / n / 1e9, m / 1e9, n }' $VT_DIR/opens)"
log "open in the metrics of the last run: $(grep -E '^volumed_operation_duration_seconds_(sum|count)\{.*operation="open"' $VT_DIR/metrics2 | tr '\n' ' ')"
log "first open with its encrypt (pbkdf2): $(grep '"msg":"operation finished"' $ALOG | grep '"volume":"ca","operation":"open"' | head -n 1 | grep -o '"duration":[0-9]*' | cut -d: -f2 | awk '{ printf "%.3f s", $1 / 1e9 }'), of which encrypt $(grep '"msg":"operation finished"' $ALOG | grep '"volume":"ca","operation":"encrypt"' | grep -o '"duration":[0-9]*' | cut -d: -f2 | awk '{ printf "%.3f s", $1 / 1e9 }')"
