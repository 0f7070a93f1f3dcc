# vmtest: timeout=120
# An iSCSI target that requires CHAP. A wrong secret is reported as an
# authentication failure; the right one (the manifest fixed) makes the
# volume Ready. Neither secret shows in the agent's log, its status, the
# iscsiadm command lines it runs, or any process's command line sampled
# while it works.

IQN=iqn.2024-01.io.example:chap
CHAP_USER=vmtest-user
# Only shell builtins ever see these, so they are on no command line here.
RIGHT=Vt-right-5ecret-4821
WRONG=Vt-wrong-5ecret-1377
lio_target $IQN 1 64 $CHAP_USER $RIGHT
lio_portal $IQN 127.0.0.1:3260

S=$VT_DIR/secrets
mkdir -p $S && chmod 0700 $S
echo -n "$RIGHT" > $S/right
echo -n "$WRONG" > $S/wrong
printf '%s\n%s\n' "$RIGHT" "$WRONG" > $VT_DIR/patterns
chmod 0600 $S/right $S/wrong $VT_DIR/patterns
grep -qF -f $VT_DIR/patterns $S/right || fail "the secret detector does not detect"

# Every iscsiadm the agent runs by name goes through this recorder.
mkdir -p $VT_DIR/bin
echo '#!/bin/sh' > $VT_DIR/bin/iscsiadm
echo "echo \"iscsiadm \$*\" >> $VT_DIR/iscsiadm-argv.log" >> $VT_DIR/bin/iscsiadm
echo 'exec /usr/local/sbin/iscsiadm "$@"' >> $VT_DIR/bin/iscsiadm
chmod 0755 $VT_DIR/bin/iscsiadm

# Every process's command line, every 20 ms.
(while :; do
	cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' >> $VT_DIR/cmdlines
	usleep 20000
done) &
SAMPLER=$!
bg_track $SAMPLER

agent_up PATH=$VT_DIR/bin:$PATH
iscsi_manifest ch $IQN 0 127.0.0.1:3260 $CHAP_USER $S/wrong
auth_reported() { vstatus ch 2>/dev/null | grep '"lastError"' | grep -qi auth; }
wait_until 60 auth_reported ||
	fail "60s with the wrong secret and lastError does not mention authentication: $(vstatus ch 2>&1 | grep lastError)"
[ "$(vfield ch phase)" != Ready ] || fail "ch is Ready with the wrong secret"
log "wrong secret: $(vfield ch phase): $(vfield ch lastError)"
expect_count "sessions to $IQN with the wrong secret" "$(iscsi_sessions $IQN)" 0
vstatus > $VT_DIR/status-wrong.json 2>&1
$VOLUMED status --socket $SOCK ch > $VT_DIR/status-wrong.txt 2>&1

iscsi_manifest ch $IQN 0 127.0.0.1:3260 $CHAP_USER $S/right
ready 60 ch
expect_count "sessions to $IQN with the right secret" "$(iscsi_sessions $IQN)" 1
check_rw $MNT/ch chap
vstatus > $VT_DIR/status-right.json 2>&1
$VOLUMED status --socket $SOCK ch > $VT_DIR/status-right.txt 2>&1

rm_manifest ch
wait_until 60 gone ch || fail "ch still listed 60s after its manifest was removed"
wait_until 30 is 0 iscsi_sessions || fail "iSCSI sessions left: $(iscsi_sessions)"
agent_stop
kill $SAMPLER
wait $SAMPLER 2>/dev/null

grep -q volumed $VT_DIR/cmdlines 2>/dev/null || fail "the command line sampler never saw volumed"
if [ -s $VT_DIR/iscsiadm-argv.log ]; then
	log "iscsiadm calls recorded: $(wc -l < $VT_DIR/iscsiadm-argv.log)"
else
	log "no iscsiadm call went through PATH (absolute path?); the sampler is the check"
fi
for f in $ALOG $VT_DIR/status-* $VT_DIR/iscsiadm-argv.log $VT_DIR/cmdlines; do
	[ -e $f ] || continue
	if grep -qF -f $VT_DIR/patterns $f; then
		grep -F -f $VT_DIR/patterns $f | head -n 3 | sed 's/Vt-[a-z]*-5ecret-[0-9]*/<SECRET>/g'
		fail "a CHAP secret appears in ${f#$VT_DIR/}"
	fi
done
