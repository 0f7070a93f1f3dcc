# vmtest: timeout=120
# Mutual CHAP: the target also proves itself to the initiator. With the
# target's right mutual secret the volume becomes Ready; a LUN whose
# target answers with another secret is refused, and no secret reaches
# the agent's log or status.

IQN=iqn.2024-01.io.example:chapm
USER=vmtest-user
PASS=Vt-pass-5ecret-9051
MUSER=vmtest-target
MPASS=Vt-mutual-5ecret-7730
lio_target $IQN 1 64 $USER $PASS
echo -n "$MUSER" > $LIO/iscsi/$IQN/tpgt_1/auth/userid_mutual || fail "LIO: mutual userid"
echo -n "$MPASS" > $LIO/iscsi/$IQN/tpgt_1/auth/password_mutual || fail "LIO: mutual password"
lio_portal $IQN 127.0.0.1:3260

S=$VT_DIR/secrets
mkdir -p $S && chmod 0700 $S
echo -n "$PASS" > $S/pass
echo -n "$MPASS" > $S/mutual
echo -n "Vt-bogus-5ecret-1111" > $S/bogus
chmod 0600 $S/pass $S/mutual $S/bogus

mutual_manifest() {
	manifest cm "iscsi: {portal: \"127.0.0.1:3260\", iqn: $IQN, lun: 0, chap: {username: $USER, passwordFile: $S/pass, mutualUsername: $MUSER, mutualPasswordFile: $S/$1}}"
}
agent_up
mutual_manifest bogus
refused() { vstatus cm 2>/dev/null | grep '"lastError"' | grep -qi 'auth\|login'; }
wait_until 60 refused || fail "a target failing mutual CHAP was not refused: $(vstatus cm 2>&1 | grep lastError)"
[ "$(vfield cm phase)" != Ready ] || fail "cm is Ready although the target's mutual secret is wrong"
expect_count "sessions with a wrong mutual secret" "$(iscsi_sessions $IQN)" 0

mutual_manifest mutual
ready 60 cm
check_rw $MNT/cm mutual
vstatus > $VT_DIR/status.json 2>&1
rm_manifest cm
wait_until 60 gone cm || fail "cm still listed 60s after its manifest was removed"
wait_until 30 is 0 iscsi_sessions || fail "iSCSI sessions left: $(iscsi_sessions)"
agent_stop
for f in $ALOG $VT_DIR/status.json; do
	grep -q "5ecret" $f && fail "a CHAP secret appears in ${f#$VT_DIR/}"
done
true
