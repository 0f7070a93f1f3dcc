# vmtest: timeout=90 disks
# drivers/luks on a kernel with dm-crypt, through the test-only vmluks:
# a blank virtio disk is formatted with two key files, opened by the
# second key after a wrong one, given ext4 and data, closed and reopened
# by the other key with the data intact; an open mapping is adopted, not
# reopened. A foreign LUKS2 header that no key opens is left
# byte-identical by open and by format. While cryptsetup runs, no
# process's argv or environment holds a key. Open latency is logged.

modprobe dm-crypt && modprobe xts && modprobe algif_skcipher || fail "modprobe dm-crypt, xts, algif_skcipher"
[ -c /dev/mapper/control ] || fail "no /dev/mapper/control after loading dm-mod"

by_serial() {
	local b
	for b in /sys/block/*; do [ "$(cat $b/serial 2>/dev/null)" = VOLLUKS1 ] && echo /dev/${b##*/}; done
}
has() { [ -n "$("$@")" ]; }
wait_until 20 has by_serial || fail "the VM has no disk with serial VOLLUKS1"
D=$(by_serial)
U=5b7e2c1a-0d3f-4a6b-9c8d-1e2f3a4b5c6d
UHEX=$(echo $U | tr -d -)
NAME=volumed-enc

# Keys are printable so grep can look for them in /proc.
umask 077
key() { head -c 32 /dev/urandom | sha256sum | cut -c1-64 > $VT_DIR/$1; }
key k1
key k2
key wrong
umask 022

cat $VT_DIR/k1 $VT_DIR/k2 $VT_DIR/wrong > $VT_DIR/keys.pat
# The sampler (lib.sh) runs while keys are handed over (format, the
# first opens, argon2id, the foreign device), not while open latency is
# measured.
sampler_on

# Format, inspect, open by the second key after a wrong one.
vmluks format $D $U $VT_DIR/k1 $VT_DIR/k2 || fail "format $D"
[ "$(vmluks inspect $D)" = "true true $U 2" ] || fail "inspect after format: '$(vmluks inspect $D)', want a whole header, $U, 2 keyslots"
out=$(vmluks open $D $NAME $U $VT_DIR/wrong $VT_DIR/k2) || fail "open $D"
set -- $out
[ "$1 $2 $3 $4" = "/dev/mapper/$NAME false 1 file" ] || fail "open said '$*', want a new mapping by key 1 (file)"
log "first open (pbkdf2 keyslots, one wrong key tried first): $5 s"
[ -b /dev/mapper/$NAME ] || fail "no /dev/mapper/$NAME"
dm=
for b in /sys/block/dm-*; do [ "$(cat $b/dm/name)" = $NAME ] && dm=$b; done
[ -n "$dm" ] || fail "no /sys/block/dm-*/dm/name says $NAME"
[ "$(cat $dm/dm/uuid)" = "CRYPT-LUKS2-$UHEX-$NAME" ] || fail "DM uuid '$(cat $dm/dm/uuid)', want CRYPT-LUKS2-$UHEX-$NAME"
[ "$(ls $dm/slaves)" = "${D#/dev/}" ] || fail "$NAME sits on '$(ls $dm/slaves)', want ${D#/dev/}"

mkfs.ext4 -q /dev/mapper/$NAME || fail "mkfs.ext4 on the mapping"
mkdir -p $VT_DIR/m
mount /dev/mapper/$NAME $VT_DIR/m || fail "mount the mapping"
echo "secret data $U" > $VT_DIR/m/data
# The filesystem's first MiB, as the mapping shows it, is not what the
# disk holds after the 16 MiB LUKS2 header area: it is ciphertext there.
plain=$(dd if=/dev/mapper/$NAME bs=64k count=16 2>/dev/null | sha256sum)
raw=$(dd if=$D bs=64k skip=256 count=16 2>/dev/null | sha256sum)
[ "$plain" != "$raw" ] || fail "the disk holds the plaintext after the header"
umount $VT_DIR/m || fail "umount"

# Open again while open: adopted, no cryptsetup run, no key needed.
out=$(vmluks open $D $NAME $U) || fail "second open (adopt)"
set -- $out
[ "$1 $2 $3" = "/dev/mapper/$NAME true -1" ] || fail "second open said '$*', want the mapping adopted"
log "adopting an open mapping: $5 s"

vmluks close $NAME || fail "close"
[ -e /dev/mapper/$NAME ] && fail "/dev/mapper/$NAME still there after close"
vmluks close $NAME || fail "close of a closed mapping is not a no-op"

# Reopen by the first key only; the data is there. Then time opens.
sampler_off
total=0
for i in 1 2 3; do
	out=$(vmluks open $D $NAME $U $VT_DIR/k1) || fail "reopen $i"
	set -- $out
	[ "$3" = 0 ] || fail "reopen $i opened by key '$3', want 0"
	total=$(awk "BEGIN { print $total + $5 }")
	if [ $i = 1 ]; then
		mount -o ro /dev/mapper/$NAME $VT_DIR/m || fail "mount after reopen"
		[ "$(cat $VT_DIR/m/data)" = "secret data $U" ] || fail "data after close and reopen: '$(cat $VT_DIR/m/data)'"
		umount $VT_DIR/m
	fi
	vmluks close $NAME || fail "close $i"
done
log "open latency, pbkdf2 keyslot, right key first: $(awk "BEGIN { printf \"%.3f\", $total / 3 }") s mean of 3"
sampler_on

# argon2id (cryptsetup's default KDF, here at a small forced cost) runs
# threads: glibc then needs libgcc_s, which the image must carry.
A=$(mkloop argon 40) || fail "a loop device for argon.img"
VMLUKS_PBKDF=argon2id vmluks format $A 7d1f3c5e-2a4b-4c6d-8e0f-1a2b3c4d5e6f $VT_DIR/k1 || fail "format argon2id"
out=$(vmluks open $A volumed-argon "" $VT_DIR/k1) || fail "open argon2id"
set -- $out
log "open latency, argon2id keyslot (4 passes, 32 MiB): $5 s"
vmluks close volumed-argon || fail "close argon2id"

# A foreign LUKS2 header whose key we do not hold: open says locked,
# format says not blank, and neither changes a byte.
F=$(mkloop foreign 40) || fail "a loop device for foreign.img"
head -c 32 /dev/urandom > $VT_DIR/theirs
cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file $VT_DIR/theirs $F ||
	fail "make the foreign header"
before=$(sha256sum < $F)
vmluks open $F volumed-foreign "" $VT_DIR/k1 $VT_DIR/k2 2> $VT_DIR/open.err
rc=$?
[ $rc = 3 ] || fail "open of a foreign header: exit $rc ($(cat $VT_DIR/open.err)), want 3 (locked)"
grep -q "does not match any keyslot" $VT_DIR/open.err || fail "the locked error gives no reason: $(cat $VT_DIR/open.err)"
vmluks format $F $U $VT_DIR/k1 2> $VT_DIR/format.err
rc=$?
[ $rc = 4 ] || fail "format over a foreign header: exit $rc ($(cat $VT_DIR/format.err)), want 4 (not blank)"
[ "$(sha256sum < $F)" = "$before" ] || fail "the foreign device changed"
[ -e /dev/mapper/volumed-foreign ] && fail "a mapping of the foreign device exists"
grep -q -F -f $VT_DIR/keys.pat $VT_DIR/open.err $VT_DIR/format.err && fail "a key is in an error message"

sampler_off
[ -s $VT_DIR/leaks ] && fail "a key was in /proc: $(sort -u $VT_DIR/leaks | tr '\n' ' ')"
[ -s $VT_DIR/seen ] || fail "the sampler never saw cryptsetup running: the /proc check proved nothing"
log "/proc samples with cryptsetup running: $(sort -u $VT_DIR/seen | wc -l) processes, none held a key in argv or environ"
losetup -d $A
losetup -d $F
