# vmtest: timeout=90 tpm
# drivers/luks with a TPM2 key, through the test-only vmluks, on a VM with
# a software TPM2 (swtpm on the host, a TIS device here): a volume is
# formatted with a key sealed to PCR 7 and a key file, opened by the TPM
# alone, given data, closed and reopened with the data intact. Then PCR 7
# is extended (another boot chain): the TPM2 key alone leaves it locked,
# saying PCR 7 changed; the TPM2 key then the key file opens it by the
# file. Neither the unsealed passphrase nor the key file is in any sampled
# /proc/*/cmdline or environ. The unseal cost and open latency are logged.

modprobe dm-crypt && modprobe xts && modprobe algif_skcipher || fail "modprobe dm-crypt, xts, algif_skcipher"
wait_until 10 test -c /dev/tpmrm0 || fail "no /dev/tpmrm0: the TPM2 was not found ($(dmesg | grep -i tpm | tail -3))"

D=$(mkloop tpm2 40) || fail "a loop device for tpm2.img"
U=3c9e1f2a-4b5d-4e6f-8a7b-9c0d1e2f3a4b
NAME=volumed-tpm

umask 077
head -c 32 /dev/urandom | sha256sum | cut -c1-64 > $VT_DIR/k1
umask 022

# The sampler keeps the cmdline and environ of every cryptsetup and
# vmluks it catches; they are searched once the passphrase is known
# (it exists only once the format has sealed it).
printf 'cryptsetup\nvmluks\n' > $VT_DIR/procs.pat
sampler_on() {
	touch $VT_DIR/sampling
	(
		while [ -e $VT_DIR/sampling ]; do
			for p in $(grep -l -F -f $VT_DIR/procs.pat /proc/[0-9]*/cmdline 2>/dev/null); do
				d=${p%/cmdline}
				{ cat $d/cmdline $d/environ; echo; } >> $VT_DIR/samples 2>/dev/null
				echo $d >> $VT_DIR/seen
			done
		done
	) &
	SAMPLER=$!
	bg_track $SAMPLER
}
sampler_off() { rm -f $VT_DIR/sampling && wait $SAMPLER; }
sampler_on

log "PCR 7 before: $(vmluks pcr-read 7)"
vmluks format $D $U tpm2:7 $VT_DIR/k1 || fail "format $D with tpm2:7 and a key file"
[ "$(vmluks inspect $D)" = "true true $U 2 systemd-tpm2" ] ||
	fail "inspect after format: '$(vmluks inspect $D)', want 2 keyslots and a systemd-tpm2 token"

out=$(vmluks open $D $NAME $U tpm2:7) || fail "open by the TPM alone"
set -- $out
[ "$1 $2 $3 $4" = "/dev/mapper/$NAME false 0 tpm2" ] || fail "open said '$*', want a new mapping by key 0 (tpm2)"
log "first open by the TPM: $5 s, of which unsealing $6 s"
mkfs.ext4 -q /dev/mapper/$NAME || fail "mkfs.ext4 on the mapping"
mkdir -p $VT_DIR/m
mount /dev/mapper/$NAME $VT_DIR/m || fail "mount the mapping"
echo "sealed data $U" > $VT_DIR/m/data
umount $VT_DIR/m || fail "umount"
vmluks close $NAME || fail "close"
sampler_off

total=0
unseal=0
for i in 1 2 3; do
	out=$(vmluks open $D $NAME $U tpm2:7) || fail "reopen $i by the TPM"
	set -- $out
	[ "$3 $4" = "0 tpm2" ] || fail "reopen $i said '$*', want key 0 (tpm2)"
	total=$(awk "BEGIN { print $total + $5 }")
	unseal=$(awk "BEGIN { print $unseal + $6 }")
	if [ $i = 1 ]; then
		mount -o ro /dev/mapper/$NAME $VT_DIR/m || fail "mount after reopen"
		[ "$(cat $VT_DIR/m/data)" = "sealed data $U" ] || fail "data after close and reopen: '$(cat $VT_DIR/m/data)'"
		umount $VT_DIR/m
	fi
	vmluks close $NAME || fail "close $i"
done
log "open latency by the TPM2 key: $(awk "BEGIN { printf \"%.3f\", $total / 3 }") s mean of 3, of which TPM2 unsealing $(awk "BEGIN { printf \"%.4f\", $unseal / 3 }") s"

# The passphrase the TPM gives, for the /proc search (into a file: never
# an argument).
umask 077
vmluks tpm2-passphrase $D > $VT_DIR/pass || fail "unseal the token for the /proc search"
umask 022
[ "$(wc -c < $VT_DIR/pass)" = 45 ] || fail "the passphrase is not the base64 of 32 bytes: $(wc -c < $VT_DIR/pass) bytes"

# Another boot chain: PCR 7 changes.
sampler_on
before=$(vmluks pcr-read 7)
vmluks pcr-extend 7 || fail "extend PCR 7"
[ "$(vmluks pcr-read 7)" != "$before" ] || fail "PCR 7 did not change"
vmluks open $D $NAME $U tpm2:7 2> $VT_DIR/open.err
rc=$?
[ $rc = 3 ] || fail "open by the TPM after PCR 7 changed: exit $rc ($(cat $VT_DIR/open.err)), want 3 (locked)"
grep -q "tpm2: PCR 7 differs from the sealed policy" $VT_DIR/open.err || fail "the locked error does not say PCR 7 changed: $(cat $VT_DIR/open.err)"
log "locked: $(cat $VT_DIR/open.err)"
[ -e /dev/mapper/$NAME ] && fail "a mapping exists after a locked open"
out=$(vmluks open $D $NAME $U tpm2:7 $VT_DIR/k1) || fail "open by the TPM then the key file"
set -- $out
[ "$3 $4" = "1 file" ] || fail "open said '$*', want key 1 (file)"
mount -o ro /dev/mapper/$NAME $VT_DIR/m || fail "mount after the key-file open"
[ "$(cat $VT_DIR/m/data)" = "sealed data $U" ] || fail "data after the key-file open: '$(cat $VT_DIR/m/data)'"
umount $VT_DIR/m
vmluks close $NAME || fail "close after the key-file open"
sampler_off

grep -q cryptsetup $VT_DIR/samples || fail "the sampler never saw cryptsetup running: the /proc check proved nothing"
grep -q -F -f $VT_DIR/pass $VT_DIR/samples && fail "the unsealed passphrase was in a /proc cmdline or environ"
grep -q -F -f $VT_DIR/k1 $VT_DIR/samples && fail "the key file was in a /proc cmdline or environ"
grep -q -F -f $VT_DIR/pass $VT_DIR/open.err && fail "the passphrase is in an error message"
log "/proc samples of cryptsetup and vmluks: $(sort -u $VT_DIR/seen | wc -l) processes, none held the passphrase or the key"
losetup -d $D
