# vmtest: timeout=150 tpm
# The agent with a volume opened by the host's TPM2 or a key file
# (keys: [{tpm2: {pcrs: [7]}}, {file: ...}]) on a software TPM2: the
# blank image gets both keys (a systemd-tpm2 token), the TPM opens it and
# the status says so. After PCR 7 changes (another boot chain) and a
# reboot, the key file opens it; with the TPM2 key alone it stays Locked,
# the condition naming PCR 7, the header byte-identical. The unsealed
# passphrase and the key file are in no sampled /proc/*/cmdline or
# environ, log, status or state file.

modprobe dm-crypt && modprobe xts && modprobe algif_skcipher || fail "modprobe dm-crypt, xts, algif_skcipher"
wait_until 10 test -c /dev/tpmrm0 || fail "no /dev/tpmrm0: the TPM2 was not found ($(dmesg | grep -i tpm | tail -3))"

umask 077
head -c 32 /dev/urandom | sha256sum | cut -c1-64 > $VT_DIR/k
umask 022
cp $VT_DIR/k $VT_DIR/keys.pat
sampler_on

TPM="{tpm2: {pcrs: [7]}}"
FILE="{file: $VT_DIR/k}"
key_kind() { vstatus ct 2>/dev/null | sed -n 's/^      "keyKind": "\(.*\)",*$/\1/p'; }
header() { dd if=$IMG/ct.img bs=1M count=16 2>/dev/null | sha256sum | cut -d' ' -f1; }

# 1. Formatted with both keys, opened by the TPM.
luks_manifest ct "$TPM, $FILE"
agent_up
ready 120 ct
check_rw $MNT/ct crypt-tpm
[ "$(key_kind)" = tpm2 ] || fail "ct was opened by '$(key_kind)', want tpm2: $(vstatus ct)"
set -- $(vmluks inspect $(vfield ct device))
[ "$4 $5" = "2 systemd-tpm2" ] || fail "ct's header: $*; want 2 keyslots and a systemd-tpm2 token"
# The passphrase the TPM unseals, searched for from now on.
vmluks tpm2-passphrase $(vfield ct device) >> $VT_DIR/keys.pat || fail "unseal ct's token for the search"
log "open by the TPM2 (unseal included): $(grep '"msg":"operation finished"' $ALOG | grep '"operation":"open"' | grep -o '"duration":[0-9]*' | cut -d: -f2 | awk '{ printf "%.3f s", $1 / 1e9 }') with its encrypt"

# A reboot with the same boot chain: the TPM opens it again.
opened() { grep '"msg":"operation finished"' $ALOG | grep '"operation":"open"' | tail -n 1 | grep -o '"duration":[0-9]*' | cut -d: -f2 | awk '{ printf "%.3f s", $1 / 1e9 }'; }
fake_reboot
agent_up
ready 120 ct
[ "$(key_kind)" = tpm2 ] || fail "after a reboot ct was opened by '$(key_kind)', want tpm2"
log "open by the TPM2 after a reboot (unseal included): $(opened)"

# 2. Another boot chain: PCR 7 changed. The key file opens it.
fake_reboot
vmluks pcr-extend 7 || fail "extend PCR 7"
agent_up
ready 120 ct
[ "$(key_kind)" = file ] || fail "after PCR 7 changed ct was opened by '$(key_kind)', want file: $(vstatus ct)"
check_has $MNT/ct crypt-tpm
log "open by the key file after the TPM2 key failed: $(opened)"

# 3. The TPM2 key alone: Locked, PCR 7 named, the header untouched.
fake_reboot
luks_manifest ct "$TPM"
before=$(header)
agent_up
locked() { vstatus ct 2>/dev/null | grep -q '"type": "Locked"'; }
wait_until 60 locked || fail "ct is not Locked: $(vstatus ct)"
vstatus ct | grep '"message"' | grep -q 'tpm2 pcrs 7' || fail "the Locked condition does not name the TPM2 key: $(vstatus ct)"
vstatus ct | grep '"message"' | grep -q 'PCR 7 differs' || fail "the Locked condition does not say PCR 7 changed: $(vstatus ct)"
vstatus > $VT_DIR/status.json
[ "$(header)" = "$before" ] || fail "ct's header changed while it was Locked"
rm_manifest ct
wait_until 60 gone ct || fail "ct still listed after its manifest was removed"
[ "$(header)" = "$before" ] || fail "ct's header changed at its teardown"
sampler_off
agent_stop

[ -s $VT_DIR/leaks ] && fail "a key was in /proc: $(sort -u $VT_DIR/leaks | tr '\n' ' ')"
[ -s $VT_DIR/seen ] || fail "the sampler never saw cryptsetup running: the /proc check proved nothing"
grep -l -F -f $VT_DIR/keys.pat $ALOG $STATE/state.db $VT_DIR/status.json && fail "a key is in the log, the state file or the status"
log "/proc samples with cryptsetup running: $(sort -u $VT_DIR/seen | wc -l) processes, none held the key file's key or the unsealed passphrase in argv or environ"
